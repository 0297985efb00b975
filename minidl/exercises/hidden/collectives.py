"""Hidden checks of the allreduce exercises: other rank counts and a LeNet-5-sized gradient."""

from minidl.exercises.strict_comm import ring_pattern
from minidl.reference.dist import allreduce

from .. import hidden_check
from ..checks.collectives import TIMEOUT_S, check_allreduce

LENET5 = 61_706  # LeNet-5's parameters: messages far above any eager limit


@hidden_check("6.1", "5 ranks, LeNet-5's 61,706 values", ranks=5, timeout=TIMEOUT_S)
def ring_five_ranks(comm):
    check_allreduce(comm, allreduce.ring, "ring", ring_pattern, sizes=(7, LENET5), seed=61)


@hidden_check("6.2", "3 ranks (one folded in), 30,000 values", ranks=3, timeout=TIMEOUT_S)
def butterfly_three_ranks(comm):
    check_allreduce(comm, allreduce.butterfly, "butterfly", sizes=(5, 30_000), seed=62)


@hidden_check("6.3", "5 ranks, 30,000 values", ranks=5, timeout=TIMEOUT_S)
def tree_five_ranks(comm):
    check_allreduce(comm, allreduce.tree, "tree", sizes=(5, 30_000), seed=63)


@hidden_check("6.4", "6 ranks (two folded in), 30,000 values", ranks=6, timeout=TIMEOUT_S)
def rabenseifner_six_ranks(comm):
    check_allreduce(comm, allreduce.rabenseifner, "rabenseifner", sizes=(9, 30_000), seed=64)
