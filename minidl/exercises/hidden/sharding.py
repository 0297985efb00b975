"""Hidden checks of the ZeRO exercises: the messages, and what a rank keeps.

A ZeRO that allreduces the whole gradient, keeps the whole optimizer state, cuts other shards
than block_bounds', or keeps a layer's gathered parameters between its calls computes the
right numbers, and the visible checks pass it. These hold it to ZeRO's memory (Rajbhandari et
al. 2020): a rank receives its shard of the mean gradient by one reduce-scatter a step (ZeRO-3:
a backward) and by no allreduce; its optimizer state is its shard's; after forward and after
backward the layer holds its shard and its gradient's shard, nothing gathered. With Adam's two
moments, on 3 ranks and 2, and lengths that leave a shard empty.
"""

from minidl import optim

from .. import expect_close, expect_equal, expect_true, hidden_check
from ..checks.collectives import expect_on_every_rank
from ..checks.sharding import STEPS, expect_results, zero1_runs, zero3_runs


def adam(params):
    return optim.Adam(params, lr=0.05, betas=(0.8, 0.95))


def expect_shards(run):
    """``run``'s reductions, optimizer state and held bytes: those of this rank's shard."""
    start, stop = run.bounds
    shard = f"elements {start}:{stop}, block_bounds' cut: the first n % P shards one longer"
    for phase, collectives, reduces_gradient in run.phases:
        whole = [nbytes for name, nbytes in collectives if name == "allreduce"]
        expect_true(
            f"{run.case}, {phase}: no allreduce",
            not whole,
            detail=f"it allreduced {sum(whole)} bytes: ZeRO reduce-scatters the gradient, so "
            "that each rank receives (and keeps) its shard of the mean only",
        )
        expect_equal(
            f"{run.case}, {phase}: the reductions, and the bytes this rank receives from each "
            f"(its shard of the gradient: {shard})",
            collectives,
            [("reduce_scatter", run.shard_bytes)] if reduces_gradient else [],
        )
    if run.state is not None:
        got, expected = run.state
        expect_equal(f"{run.case}: the names in the optimizer state", sorted(got), sorted(expected))
        for name, value in expected.items():
            expect_close(
                f"{run.case}: the optimizer state {name!r} after {STEPS} steps, that of this "
                f"rank's shard only ({shard})",
                got[name],
                value,
                rtol=1e-12,
                atol=1e-12,
            )
    for when, held, allowed in run.held:
        expect_true(
            f"{run.case}: {when} the layer holds its shard and its gradient's, nothing gathered",
            held <= allowed,
            detail=f"it holds {held} bytes of arrays, {allowed} allowed; all {run.n} parameters "
            f"are {8 * run.n} bytes: keep them in a local variable, freed when the call returns",
        )


def expect_all(runs):
    expect_results(runs)
    for run in runs:
        expect_shards(run)


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
