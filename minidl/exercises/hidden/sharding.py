"""Hidden checks of the ZeRO exercises: the messages, and what a rank keeps.

The visible checks' rules (``expect_all``: one reduce-scatter a step and no allreduce, the
shard's optimizer state, a layer that holds its shard only) with Adam's two moments, on 3
ranks and 2, and lengths that leave a shard empty.
"""

from minidl import optim

from .. import hidden_check
from ..checks.collectives import expect_on_every_rank
from ..checks.sharding import expect_all, zero1_runs, zero3_runs


def adam(params):
    return optim.Adam(params, lr=0.05, betas=(0.8, 0.95))


@hidden_check(
    "15.1", "Adam, 2, 13 and 1000 values: one reduce-scatter a step, the shard's state", ranks=3
)
def zero1_shards(comm):
    runs = zero1_runs(comm, (2, 13, 1000), adam, seed=1511)
    expect_on_every_rank(comm, lambda: expect_all(runs))


@hidden_check(
    "15.2", "Linear(10, 5) and Linear(1, 1): reduce-scatter once, hold the shard", ranks=3
)
def zero3_shards(comm):
    runs = zero3_runs(comm, ((10, 5), (1, 1)), seed=1521)
    expect_on_every_rank(comm, lambda: expect_all(runs))
