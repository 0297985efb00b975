"""Hidden checks of the recomputation exercise: other cuts of the chain, batches and draws.

The visible check cuts the 10 layers into 3 segments; these cut them into 2 and 5, so that
a forward must keep the inputs of whichever segments it is given (and no activation between
them), and each rerun must draw its own segment's dropout masks again.
"""

import numpy as np

from .. import hidden_check
from ..checks.recompute import compare_recompute


@hidden_check("14.1", "2 and 5 segments, batches of 9 and 4, other draws")
def recompute_other_cuts():
    compare_recompute(np.random.default_rng(1401), batch=9, segments=2, seed=141)
    compare_recompute(np.random.default_rng(1402), batch=4, segments=5, seed=142)
