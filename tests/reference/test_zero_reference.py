"""ZeRO in textbook form (minidl/reference/dist/zero.py) and its exercises, 15.1 and 15.2: the
reference passes the visible and the hidden checks on 2, 3 and 4 ranks, and wrong solutions
that compute the right numbers (an allreduce of the whole gradient, the whole optimizer state,
another cut of the shards, a layer that keeps its gathered parameters) fail the hidden checks,
saying why. The MPI tests launch ``mpi_zero_checks.py``."""

import pathlib

import pytest

from minidl.exercises import catalogue, hidden_catalogue

RUNNER = pathlib.Path(__file__).with_name("mpi_zero_checks.py")
PATH = "minidl/reference/dist/zero.py"


def test_each_exercise_has_a_visible_and_a_hidden_check_on_three_ranks():
    visible = [(e.id, e.ranks) for e in catalogue() if e.path == PATH]
    hidden = [(e.id, e.ranks) for e in hidden_catalogue() if e.path == PATH]
    assert visible == hidden == [("15.1", 3), ("15.2", 3)]


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", (2, 3, 4))
def test_the_reference_passes_the_visible_and_hidden_checks(run_checks, nprocs):
    run_checks(nprocs, "reference", script=RUNNER)


@pytest.mark.mpi
def test_wrong_solutions_with_the_right_numbers_fail_the_hidden_checks(run_checks):
    run_checks(
        3,
        "zero1_allreducing",
        "zero1_whole_state",
        "zero1_ceil_shards",
        "zero3_keeping",
        "zero3_allreducing",
        script=RUNNER,
    )


@pytest.mark.mpi
def test_wrong_numbers_fail_the_visible_checks(run_checks):
    """A shard read at rank * (n // P), and a layer that gathers once and computes from that
    copy after the shard has been updated."""
    run_checks(3, "zero1_floor_offsets", "zero3_gathering_once", script=RUNNER)
