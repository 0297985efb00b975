"""Synchronised batch norm in textbook form (minidl/reference/dist/sync_batchnorm.py) and its
exercise, 16.1: the reference passes the visible and the hidden checks on 2, 3 and 4 ranks;
typical wrong solutions fail, saying where: statistics of each rank's share, a backward
without its allreduce, a join without the spread of the shares' means (the visible check),
means and variances averaged as if the shares were even, and sums of squares (the hidden
ones). The MPI tests launch ``mpi_sync_bn_checks.py``."""

import pathlib

import numpy as np
import pytest

from minidl.exercises import catalogue, hidden_catalogue
from minidl.reference.dist.sync_batchnorm import join_statistics

RUNNER = pathlib.Path(__file__).with_name("mpi_sync_bn_checks.py")
PATH = "minidl/reference/dist/sync_batchnorm.py"


def test_the_exercise_has_a_visible_and_three_hidden_checks_on_three_ranks():
    visible = [(e.id, e.ranks) for e in catalogue() if e.path == PATH]
    hidden = sorted((e.id, e.ranks) for e in hidden_catalogue() if e.path == PATH)
    assert visible == [("16.1", 3)]
    assert hidden == [("16.1", 3)] * 3


def test_joining_uneven_shares_gives_the_whole_batchs_mean_and_variance():
    x = 1e3 + np.random.default_rng(0).standard_normal((9, 2))
    shares = [x[:5], x[5:6], x[6:]]
    counts = np.array([len(s) for s in shares], dtype=float)
    means = np.stack([s.mean(axis=0) for s in shares])
    m2s = np.stack([((s - s.mean(axis=0)) ** 2).sum(axis=0) for s in shares])
    n, mean, m2 = join_statistics(counts, means, m2s)
    assert n == 9
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(m2 / n, x.var(axis=0), rtol=1e-10)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", (2, 3, 4))
def test_the_reference_passes_the_visible_and_hidden_checks(run_checks, nprocs):
    run_checks(nprocs, "reference", script=RUNNER)


@pytest.mark.mpi
def test_wrong_solutions_fail_the_checks_saying_where(run_checks):
    run_checks(
        3,
        "per_rank",
        "backward_without_allreduce",
        "join_without_the_means",
        "join_averaging",
        "sums_of_squares",
        script=RUNNER,
    )
