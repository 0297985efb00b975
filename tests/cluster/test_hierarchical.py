"""The hierarchical allreduce across emulated nodes: exact sums, the same bits on every rank,
its textbook twin, and ``auto`` choosing it when the ranks span nodes. (On one node it runs
with every other algorithm in tests/distributed/test_collectives.py.)"""

import pathlib

import pytest

pytestmark = pytest.mark.mpi
CHECKS = pathlib.Path(__file__).resolve().parent / "hierarchical_checks.py"


@pytest.mark.parametrize("ranks", [[2, 2], [1, 3]], ids=["2x2", "1+3"])
def test_hierarchical_allreduce_across_nodes(cluster, ranks):
    result = cluster(len(ranks)).run(ranks, CHECKS, len(ranks), timeout=120)
    assert not result.timed_out and result.returncode == 0, result.output
    assert result.output.count("CHECK OK rank") == sum(ranks), result.output
