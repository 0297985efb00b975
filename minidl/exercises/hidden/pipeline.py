"""Hidden checks of the pipeline exercises: deeper pipelines, other micro-batch counts and seeds.

The visible checks use P <= 5 and M in 1, 2, 3, 5, 8; these use P = 6..8 with M = 1,
M < P, M a multiple of P and M not one, interleaved lists with V up to 4, and
weight stashing on 3 ranks.
"""

from .. import hidden_check
from ..checks.pipeline import (
    check_bubble_fraction,
    check_gpipe,
    check_one_f_one_b,
    check_weight_stashing,
)

DEEP = tuple((p, m) for p in (6, 7, 8) for m in (1, 4, 7, 12, 13))  # (P, M)
DEEP_INTERLEAVED = ((5, 2, 5), (5, 3, 15), (6, 2, 12), (2, 4, 6), (3, 4, 9))  # (P, V, M)


@hidden_check("10.1", "P = 6..8 stages, M = 1, 4, 7, 12, 13")
def gpipe_deep():
    check_gpipe(DEEP)


@hidden_check("10.2", "P = 6..8 stages, M = 1, 4, 7, 12, 13")
def one_f_one_b_deep():
    check_one_f_one_b(DEEP)


@hidden_check("10.3", "P = 6..8, and interleaved with V = 2..4 chunks")
def bubble_fraction_deep():
    check_bubble_fraction(DEEP, DEEP_INTERLEAVED)


@hidden_check("10.4", "3 stages, M = 2, 4, 5 of 15 rows, other seeds", ranks=3, timeout=120)
def weight_stashing_three_stages(comm):
    check_weight_stashing(comm, micro_batches_tried=(2, 4, 5), seed=104, net_seed=41, rows=15)
