"""Hidden checks of the allreduce exercises: other rank counts, emulated node layouts, and a
LeNet-5-sized gradient; each held to its algorithm's pattern as the visible checks are."""

from minidl.reference.dist import allreduce

from .. import hidden_check
from ..checks.collectives import (
    PATTERNS,
    TIMEOUT_S,
    check_allreduce,
    hierarchical_pattern,
    on_nodes,
)

LENET5 = 61_706  # LeNet-5's parameters: messages far above any eager limit


def run(comm, name, sizes, seed):
    check_allreduce(comm, getattr(allreduce, name), name, PATTERNS[name], sizes, seed)


@hidden_check("6.1", "5 ranks, LeNet-5's 61,706 values", ranks=5, timeout=TIMEOUT_S)
def ring_five_ranks(comm):
    run(comm, "ring", (7, LENET5), 61)


@hidden_check("6.2", "3 ranks (one folded in), 30,000 values", ranks=3, timeout=TIMEOUT_S)
def butterfly_three_ranks(comm):
    run(comm, "butterfly", (5, 30_000), 62)


@hidden_check("6.3", "5 ranks, 30,000 values", ranks=5, timeout=TIMEOUT_S)
def tree_five_ranks(comm):
    run(comm, "tree", (5, 30_000), 63)


@hidden_check("6.4", "6 ranks (two folded in), 30,000 values", ranks=6, timeout=TIMEOUT_S)
def rabenseifner_six_ranks(comm):
    run(comm, "rabenseifner", (9, 30_000), 64)


@hidden_check("6.5", "5 ranks on 2 and 3 emulated nodes, 30,000 values", ranks=5, timeout=TIMEOUT_S)
def hierarchical_five_ranks(comm):
    for layout in ([[0, 1, 2], [3, 4]], [[0, 3], [1], [2, 4]]):
        pattern = hierarchical_pattern(layout)
        check_allreduce(comm, on_nodes(layout), "hierarchical", pattern, (7, 30_000), 65)
