"""Checks of the ZeRO exercises (15.x): minidl/reference/dist/zero.py.

Oracles that run no exercise region, in float64, each rank rebuilding every rank's data from
the seed: one process training least squares on the whole batch with minidl's optimizer, and
the serial ``L.Linear`` with its autograd. Each runs on the job's 3 ranks and on 2 (the first
two, split off; the third runs alone), with lengths that neither count divides, so that the
shards are uneven. The ranks talk through a ``StrictComm``, and the checks grade ZeRO's memory
besides the values (Rajbhandari et al. 2020): a rank receives its shard of the mean gradient
by one reduce-scatter a step (ZeRO-3: a backward) and by no allreduce; its optimizer state is
its shard's; after forward and after backward the layer holds its shard and its gradient's
shard, nothing gathered. An allreduce of the whole gradient, the whole optimizer state, other
shards than block_bounds' or parameters kept between calls give the right numbers and fail.
"""

from dataclasses import dataclass, field

import numpy as np

import minidl as md
from minidl import layers as L
from minidl import optim
from minidl.dist import zero as tuned_zero
from minidl.dist import zero_layers as tuned_zero_layers
from minidl.exercises import exercise, expect_close, expect_equal, expect_true
from minidl.exercises.checks.collectives import digest, expect_on_every_rank
from minidl.exercises.checks.recompute import kept_bytes
from minidl.exercises.checks.tuned import call_watching, expect_left_alone, forbids
from minidl.exercises.strict_comm import StrictComm
from minidl.intmath import block_bounds
from minidl.reference.dist import zero

PATH = "minidl/reference/dist/zero.py"
BATCH = 3  # rows of each rank's batch
STEPS = 4
TOL = 1e-12
WHY = "the caller keeps its batch x for the next layers, and dy is shared"


def groups(comm):
    """``comm``, and its first two ranks split off as a pair (any other rank alone)."""
    return [comm, comm.split(0 if comm.rank < 2 else comm.rank, comm.rank)]


def momentum(params):
    return optim.Momentum(params, lr=0.1, momentum=0.9)


def least_squares_gradient(w, x, y):
    """d/dw of |x w - y|^2 / (2 len(y))."""
    return x.T @ (x @ w - y) / len(y)


@dataclass
class Run:
    """One run on one group of ranks: results against the oracle's, and how they were made."""

    case: str  # e.g. "11 values on 3 ranks"
    n: int  # length of the flat vector that is sharded
    bounds: tuple  # (start, stop) of this rank's shard: block_bounds(n, P)[rank]
    got: dict = field(default_factory=dict)  # name -> this rank's array
    expected: dict = field(default_factory=dict)  # name -> the oracle's
    same_bits: bool = True  # every rank of the group ends with the same weights
    state: tuple | None = None  # ZeRO-1: (this rank's optimizer state, the oracle's shard)
    phases: list = field(default_factory=list)  # (phase, StrictComm.collectives, gradient?)
    held: list = field(default_factory=list)  # ZeRO-3: (when, bytes the layer holds, allowed)
    changed: list = field(default_factory=list)  # (call, the input it changed in place or None)

    @property
    def shard_bytes(self):
        """Bytes of this rank's shard of the float64 vector."""
        return 8 * (self.bounds[1] - self.bounds[0])

    def record(self, phase, strict, reduces_gradient):
        """Keep the reductions of ``phase`` and start counting afresh."""
        self.phases.append((phase, strict.collectives, reduces_gradient))
        strict.collectives = []

    def weigh(self, when, layer):
        """Keep what ``layer`` holds now against its shard (and a gradient shard once made)."""
        allowed = self.shard_bytes * (1 if layer.grad is None else 2)
        self.held.append((when, kept_bytes(vars(layer)), allowed))


def zero1_run(group, n, make_optimizer, seed):
    """STEPS ZeRO-1 steps of least squares with ``n`` weights on ``group`` (BATCH rows a
    rank), against ``make_optimizer`` in one process on the whole batch."""
    rng = np.random.default_rng([seed, n, group.size])
    x, y = rng.standard_normal((group.size * BATCH, n)), rng.standard_normal(group.size * BATCH)
    whole = L.Parameter(rng.standard_normal(n))
    weights, state, strict = whole.data.copy(), {}, StrictComm(group)
    one_process = make_optimizer([whole])
    rule = make_optimizer([L.Parameter(np.zeros(1))]).update  # keeps its state in ``state``
    rows = slice(group.rank * BATCH, (group.rank + 1) * BATCH)
    run = Run(f"{n} values on {group.size} ranks", n, block_bounds(n, group.size)[group.rank])
    for step in range(1, STEPS + 1):
        whole.grad = least_squares_gradient(whole.data, x, y)
        one_process.step()
        local = least_squares_gradient(weights, x[rows], y[rows])
        weights = zero.zero1_step(strict, weights, local, state, rule)
        run.record(f"step {step}", strict, reduces_gradient=True)
        run.got[f"weights after step {step}"] = weights.copy()
        run.expected[f"weights after step {step}"] = whole.data.copy()
    shard = slice(*run.bounds)
    run.state = state, {k: v[shard] if np.ndim(v) else v for k, v in one_process.state[0].items()}
    run.same_bits = len(set(group.allgather_object(digest(weights)))) == 1
    return run


def zero3_run(group, inputs, outputs, seed, rounds=2, lr=0.1):
    """``rounds`` of forward, backward and an SGD step of the shard with ``ShardedLinear`` on
    ``group`` (BATCH rows a rank), against the serial layer and the mean of the ranks'
    gradients."""
    md.manual_seed(seed)
    serial = L.Linear(inputs, outputs).to("float64")
    strict = StrictComm(group)
    layer = zero.ShardedLinear(strict, serial.weight.data.copy(), serial.bias.data.copy())
    n = serial.weight.size + serial.bias.size
    run = Run(
        f"Linear({inputs}, {outputs}): {n} values on {group.size} ranks",
        n,
        block_bounds(n, group.size)[group.rank],
    )
    rng = np.random.default_rng([seed, group.size])
    for r in range(1, rounds + 1):
        xs = rng.standard_normal((group.size, BATCH, inputs))
        dys = rng.standard_normal((group.size, BATCH, outputs))
        serial.zero_grad()
        for rank in range(group.size):
            x = md.Tensor(xs[rank], requires_grad=True)
            y = serial(x)
            y.backward(dys[rank])
            if rank == group.rank:
                run.expected[f"y, round {r}"], run.expected[f"dx, round {r}"] = y.data, x.grad
        mean = np.concatenate([serial.weight.grad.ravel(), serial.bias.grad]) / group.size
        grad = f"this rank's shard of the mean gradient, round {r}"
        run.expected[grad] = mean[slice(*run.bounds)]
        x, dy = xs[group.rank], dys[group.rank]
        run.got[f"y, round {r}"], changed = call_watching(layer.forward, {"x": x})
        run.changed.append((f"the forward of round {r}", changed))
        run.record(f"the forward of round {r}", strict, reduces_gradient=False)
        run.weigh(f"after the forward of round {r}", layer)
        run.got[f"dx, round {r}"], changed = call_watching(layer.backward, {"x": x, "dy": dy})
        run.changed.append((f"the backward of round {r}", changed))
        run.record(f"the backward of round {r}", strict, reduces_gradient=True)
        run.weigh(f"after the backward of round {r}", layer)
        run.got[grad] = None if layer.grad is None else layer.grad.copy()
        if run.got[grad] is None or run.got[grad].shape != layer.shard.shape:
            break  # expect_results says what is wrong with it
        layer.shard -= lr * layer.grad
        for p in serial.parameters():
            p.data -= lr * p.grad / group.size
    return run


def expect_results(runs):
    """Every result of ``runs`` against its oracle's, and the same weights on every rank."""
    for run in runs:
        for call, changed in run.changed:
            expect_left_alone(f"{run.case}: {call}", changed, WHY)
        for name, expected in run.expected.items():
            expect_close(f"{run.case}: {name}", run.got[name], expected, rtol=TOL, atol=TOL)
        expect_true(
            f"{run.case}: every rank holds the same weights, bit for bit",
            run.same_bits,
            detail="all-gather the updated shards into every rank's weights",
        )


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


def zero1_runs(comm, sizes, make_optimizer, seed):
    return [zero1_run(g, n, make_optimizer, seed) for g in groups(comm) for n in sizes]


def zero3_runs(comm, shapes, seed):
    return [zero3_run(g, i, o, seed) for g in groups(comm) for i, o in shapes]


@exercise(
    "15.1",
    "ZeRO-1: reduce-scatter the gradient, update this rank's shard, all-gather the weights",
    path=PATH,
    ranks=3,
    hint="cut the n values with block_sizes/block_bounds; comm.reduce_scatter(grad, counts, "
    "out, op='mean') gives this rank the mean of its shard; apply update to the view "
    "weights[start:stop] (so the state is the shard's only), then comm.allgatherv(weights, "
    "counts)",
)
@forbids(tuned_zero, tuned_zero_layers, name="minidl's tuned ZeRO")
def check_zero1(comm):
    runs = zero1_runs(comm, (7, 11), momentum, seed=151)
    expect_on_every_rank(comm, lambda: expect_all(runs))


@exercise(
    "15.2",
    "ZeRO-3: gather a layer's parameters, compute, free them; reduce-scatter its gradient",
    path=PATH,
    ranks=3,
    hint="gather: put this rank's shard at its offset in an empty array of all n values and "
    "comm.allgatherv it; forward and backward each gather, use W and b and keep nothing "
    "(no attribute); backward reduce-scatters (op='mean') dW | db into self.grad, this "
    "rank's shard",
)
@forbids(tuned_zero, tuned_zero_layers, name="minidl's tuned ZeRO")
def check_zero3(comm):
    runs = zero3_runs(comm, ((6, 5),), seed=152)
    expect_on_every_rank(comm, lambda: expect_all(runs))
