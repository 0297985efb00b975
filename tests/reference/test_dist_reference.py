"""The textbook allreduce algorithms and bucketed data parallelism (minidl/reference/dist/).

The MPI tests launch ``mpi_reference_checks.py`` under mpiexec, with the
fixtures of tests/distributed (each launch has a timeout).
"""

import inspect

import numpy as np
import pytest

from minidl.dist import collectives
from minidl.dist.data_parallel import make_buckets
from minidl.exercises import catalogue
from minidl.layers import Parameter
from minidl.perf import allreduce_cost
from minidl.reference.dist.buckets import assign_buckets

PATHS = ("minidl/reference/dist/allreduce.py", "minidl/reference/dist/buckets.py")
OUR_EXERCISES = [e.id for e in catalogue() if e.path in PATHS]


def test_reference_algorithms_are_registered_apart_from_the_tuned_ones():
    names = ("mpi", "ring", "butterfly", "tree", "rabenseifner", "hierarchical")
    assert collectives.ALLREDUCE_ALGORITHMS == names
    assert tuple(collectives.REFERENCE_ALGORITHMS) == tuple(
        f"{name}_reference" for name in collectives.ALLREDUCE_ALGORITHMS[1:]
    )
    for name in collectives.REFERENCE_ALGORITHMS:
        assert collectives.check_algorithm(name, allow_auto=False) == name
    with pytest.raises(ValueError, match="ring_reference"):
        collectives.check_algorithm("ring_textbook")
    with pytest.raises(ValueError, match="import minidl.reference"):
        collectives.check_algorithm("hypercube_reference")


def test_auto_never_picks_a_reference_algorithm():
    """The rule, the cost model and the measurement choose among the tuned algorithms only."""
    tuned = set(collectives.ALLREDUCE_ALGORITHMS)
    assert {collectives.choose_by_rule(1 << k) for k in range(34)} <= tuned
    params = allreduce_cost.CostParams(alpha=1e-6, beta=1e-10, gamma=1e-10)
    assert {
        allreduce_cost.choose(1 << k, size, params) for k in range(0, 34, 3) for size in (2, 3, 8)
    } <= tuned
    measured = inspect.signature(allreduce_cost.choose_by_measurement).parameters["algorithms"]
    assert set(measured.default) <= tuned


@pytest.mark.parametrize("bucket_bytes", (1, 40, 100, 10**6))
def test_buckets_are_greedy_runs_of_the_reversed_parameters(bucket_bytes):
    """Last parameter first; each bucket fits (or is one oversized parameter) and is maximal."""
    rng = np.random.default_rng(0)
    params = [Parameter(np.zeros(rng.integers(1, 20), dtype="float32")) for _ in range(12)]
    buckets = assign_buckets(params, bucket_bytes)
    assert [p for b in buckets for p in b] == params[::-1]
    sizes = [sum(p.data.nbytes for p in b) for b in buckets]
    for bucket, size, after in zip(buckets, sizes, buckets[1:] + [None]):
        assert size <= bucket_bytes or len(bucket) == 1
        if after is not None:
            assert size + after[0].data.nbytes > bucket_bytes  # the next one did not fit
    assert [b.params for b in make_buckets(params, bucket_bytes)] == buckets


def test_the_exercises_of_this_tier():
    assert OUR_EXERCISES == ["6.1", "6.2", "6.3", "6.4", "6.5", "7.1"]
    assert all(e.ranks in (3, 4) for e in catalogue() if e.id in OUR_EXERCISES)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4, 5))
def test_reference_allreduce_equals_the_exact_sum(run_checks, nprocs):
    """Every algorithm, lengths 0, 1, < P, primes, 10007; float32/64, int32; sum and mean;
    the same bits on every rank."""
    run_checks(nprocs, "reference_sums")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", (2, 3, 4))
def test_exercise_checks_pass_on_the_reference(run_checks, nprocs):
    run_checks(nprocs, *OUR_EXERCISES)


@pytest.mark.mpi
def test_a_failure_on_one_rank_is_raised_on_every_rank(run_checks):
    run_checks(3, "failure_reaches_every_rank")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", (2, 3))
def test_bucketed_data_parallel_equals_one_process_with_the_whole_batch(run_checks, nprocs):
    run_checks(nprocs, "bucketed_equivalence")
