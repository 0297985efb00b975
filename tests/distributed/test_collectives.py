"""Allreduce algorithms, bcast and point-to-point calls on 2, 3 and 4 ranks (under mpiexec)."""

import pytest

pytestmark = pytest.mark.mpi

WORLD_SIZES = (2, 3, 4)  # 4 oversubscribes a 2-core machine: fine for correctness


@pytest.mark.parametrize("nprocs", WORLD_SIZES)
def test_rank_idiom_every_algorithm(run_checks, nprocs):
    """Each rank holds its rank: the mean is (P-1)/2 and the sum P(P-1)/2, exactly."""
    run_checks(nprocs, "rank_idiom")


@pytest.mark.parametrize("nprocs", WORLD_SIZES)
def test_random_arrays_match_numpy_and_agree_bitwise(run_checks, nprocs):
    """Sum and mean of random float32/float64/int32 arrays of lengths 0, 1, < P, primes."""
    run_checks(nprocs, "random_sums")


@pytest.mark.parametrize("nprocs", WORLD_SIZES)
def test_bcast_point_to_point_and_iallreduce(run_checks, nprocs):
    run_checks(nprocs, "bcast_p2p")


@pytest.mark.parametrize("nprocs", (2, 3))
def test_messages_served_as_they_arrive_dup_ibarrier_and_allgather(run_checks, nprocs):
    """The Communicator calls of the parameter server: wait_any, test_some, dup, cancel..."""
    run_checks(nprocs, "messages")


def test_iallreduce_runs_eagerly_without_thread_multiple(run_checks):
    """Below MPI_THREAD_MULTIPLE the hand-written iallreduce runs at once; results stay right."""
    result = run_checks(
        3, "thread_level", "bcast_p2p", "messages", env={"MPI4PY_RC_THREAD_LEVEL": "serialized"}
    )
    assert result.output.count("background thread: False") == 3, result.output


@pytest.mark.parametrize("nprocs", (2, 3))
def test_auto_picks_the_same_algorithm_on_every_rank(run_checks, nprocs):
    run_checks(nprocs, "auto")


def test_bad_arguments_name_the_fix(run_checks):
    run_checks(2, "errors")
