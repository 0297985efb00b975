"""Checks of the synchronised batch-norm exercise (16.x): minidl/reference/dist/sync_batchnorm.py.

The oracle runs no exercise region: one process with the whole batch in float64,
``F.batch_norm`` without a group and its autograd, each rank rebuilding the whole batch from
the seed. Each case runs on the job's 3 ranks and on 2 (the first two, split off; the third
runs alone), two training steps from the same running estimates: every rank's outputs and
input gradients against the oracle's rows of its share, the sums of dgamma and dbeta over
the ranks against the oracle's, and the running estimates. The ranks talk through a
``StrictComm`` that also counts allgathers, and the check grades the messages besides the
values: the forward one allgather of a few numbers per channel (not the samples), the
backward one allreduce of the two sums per channel, and nothing else.
"""

from dataclasses import dataclass, field

import numpy as np

import minidl as md
from minidl import functional as F
from minidl.autograd import Tensor
from minidl.exercises import exercise, expect_close, expect_equal, expect_true
from minidl.exercises.checks.collectives import expect_on_every_rank
from minidl.exercises.checks.sharding import groups
from minidl.exercises.checks.tuned import call_watching, expect_left_alone, forbids
from minidl.exercises.strict_comm import StrictComm
from minidl.functional import normalization as tuned_normalization
from minidl.reference.dist import sync_batchnorm

PATH = "minidl/reference/dist/sync_batchnorm.py"
STEPS = 2
MOMENTUM = 0.3
TOL = 1e-10
WHY = "the layer keeps x, gamma and beta, the backward reads its cache once, dy is shared"


class CountingComm(StrictComm):
    """``StrictComm`` that records allgathers too (the bytes this rank receives)."""

    def allgather(self, array, out=None):
        result = self._comm.allgather(array, out=out)
        self._record("allgather", result)
        return result


@dataclass
class Case:
    """One input layout: the per-sample shape (C first), and the samples of rank r's share
    ``pattern[r % len(pattern)]`` on a group of any size."""

    sample: tuple  # (C,) or (C, H, W)
    pattern: tuple  # e.g. (2,): two samples on every rank; (3, 1, 2): uneven shares
    offset: float = 0.0  # added to every sample: a mean far from the spread of about 1

    def shares(self, size):
        return tuple(self.pattern[r % len(self.pattern)] for r in range(size))


@dataclass
class Run:
    """One case on one group: results against the oracle's, and the collectives of each pass."""

    case: str  # e.g. "(N, 3) on 3 ranks, shares (2, 2, 2)"
    size: int  # ranks of the group
    channels: int
    got: dict = field(default_factory=dict)  # name -> this rank's array
    expected: dict = field(default_factory=dict)  # name -> the oracle's
    phases: list = field(default_factory=list)  # (phase, StrictComm.collectives)
    changed: list = field(default_factory=list)  # (call, the input it changed in place or None)

    def record(self, phase, counting):
        self.phases.append((phase, counting.collectives))
        counting.collectives = []


def one_process(x, dy, gamma, beta, running_mean, running_var):
    """The oracle: (y, dx, dgamma, dbeta) of the whole batch; updates the running estimates."""
    xt = md.Tensor(x, requires_grad=True)
    g, b = md.Tensor(gamma, requires_grad=True), md.Tensor(beta, requires_grad=True)
    y = F.batch_norm(xt, running_mean, running_var, g, b, training=True, momentum=MOMENTUM)
    y.backward(dy)
    return y.data, xt.grad, g.grad, b.grad


def sync_bn_run(group, case, seed):
    """STEPS training steps of ``case`` with the reference on ``group`` against one process."""
    shares = case.shares(group.size)
    rows = slice(sum(shares[: group.rank]), sum(shares[: group.rank + 1]))
    channels = case.sample[0]
    rng = np.random.default_rng([seed, group.size])
    gamma, beta = rng.uniform(0.5, 2.0, channels), rng.standard_normal(channels)
    stats = {"mean": rng.standard_normal(channels), "var": rng.uniform(0.5, 2.0, channels)}
    serial = {k: v.copy() for k, v in stats.items()}
    layout = "(N, " + ", ".join(map(str, case.sample)) + ")"
    run = Run(f"{layout} on {group.size} ranks, shares {shares}", group.size, channels)
    counting = CountingComm(group)
    for step in range(1, STEPS + 1):
        n = sum(shares)
        shape = (channels,) + (1,) * (len(case.sample) - 1)  # broadcasts over a sample
        center, spread = case.offset + rng.standard_normal(shape), rng.uniform(0.5, 3.0, shape)
        x = center + spread * rng.standard_normal((n, *case.sample))
        dy = rng.standard_normal(x.shape)
        y, dx, dgamma, dbeta = one_process(x, dy, gamma, beta, serial["mean"], serial["var"])
        run.expected |= {
            f"step {step}: y of this rank's share": y[rows],
            f"step {step}: dx of this rank's share": dx[rows],
            f"step {step}: dgamma summed over the ranks": dgamma,
            f"step {step}: dbeta summed over the ranks": dbeta,
            f"step {step}: running_mean": serial["mean"].copy(),
            f"step {step}: running_var": serial["var"].copy(),
        }
        inputs = {"comm": counting, "x": x[rows].copy(), "gamma": gamma, "beta": beta}
        (mine, cache), changed = call_watching(
            sync_batchnorm.sync_batch_norm_forward,
            inputs | {"running_mean": stats["mean"], "running_var": stats["var"]},
            free=("comm", "running_mean", "running_var"),
            momentum=MOMENTUM,
        )
        run.record(f"the forward of step {step}", counting)
        run.changed.append((f"step {step}: the forward", changed))
        (got_dx, got_dgamma, got_dbeta), changed = call_watching(
            sync_batchnorm.sync_batch_norm_backward,
            {"comm": counting, "dy": dy[rows].copy(), "cache": cache},
            free=("comm",),
        )
        run.record(f"the backward of step {step}", counting)
        run.changed.append((f"step {step}: the backward", changed))
        summed = group.allgather_object((np.asarray(got_dgamma), np.asarray(got_dbeta)))
        run.got |= {
            f"step {step}: y of this rank's share": mine,
            f"step {step}: dx of this rank's share": got_dx,
            f"step {step}: dgamma summed over the ranks": sum(g for g, _ in summed),
            f"step {step}: dbeta summed over the ranks": sum(b for _, b in summed),
            f"step {step}: running_mean": stats["mean"].copy(),
            f"step {step}: running_var": stats["var"].copy(),
        }
    return run


def sync_bn_runs(comm, cases, seed):
    return [sync_bn_run(g, case, seed) for g in groups(comm) for case in cases]


def expect_results(runs, tol=TOL):
    """Every result of ``runs`` against its oracle's."""
    for run in runs:
        for call, changed in run.changed:
            expect_left_alone(f"{run.case}: {call}", changed, WHY)
        for name, expected in run.expected.items():
            expect_close(f"{run.case}: {name}", run.got[name], expected, rtol=tol, atol=tol)


def expect_messages(run):
    """``run``'s collectives: an allgather of at most 3 numbers per channel from each rank in
    the forward; one allreduce of 2 numbers per channel in the backward."""
    for phase, collectives in run.phases:
        if phase.startswith("the forward"):
            gathered = [nbytes for name, nbytes in collectives if name == "allgather"]
            expect_equal(
                f"{run.case}, {phase}: the collectives (one allgather)",
                [name for name, _ in collectives],
                ["allgather"],
            )
            allowed = 8 * 3 * run.channels * run.size
            expect_true(
                f"{run.case}, {phase}: the allgather carries the statistics, not the samples",
                gathered[0] <= allowed,
                detail=f"this rank received {gathered[0]} bytes; [n_r, mean_r, M2_r] per channel "
                f"from each rank is at most {allowed}",
            )
        else:
            expect_equal(
                f"{run.case}, {phase}: the collectives (one allreduce of [sum dx_hat, "
                "sum dx_hat x_hat] per channel, float64)",
                collectives,
                [("allreduce", 8 * 2 * run.channels)],
            )


VISIBLE = (Case((3,), (3,)), Case((2, 3, 2), (2,)))


@exercise(
    "16.1",
    "Synchronised batch norm: forward and backward over the group",
    path=PATH,
    ranks=3,
    hint="forward: each rank's [n_r, mean_r, M2_r] per channel (M2_r = sum (x - mean_r)^2) in "
    "one vector, comm.allgather it, join the rows with Chan's formula (join_statistics: "
    "weigh each mean by its n_r, add n_r (mean_r - mean)^2 to the M2s), normalise with the "
    "joined mean and var = M2 / n, and update the running estimates with the group's n; "
    "backward: comm.allreduce [sum dx_hat, sum dx_hat x_hat] and divide by n for the two "
    "means of the serial rule",
)
@forbids(
    Tensor.backward,
    tuned_normalization.batch_norm,
    tuned_normalization.BatchNorm,
    name="minidl's tuned batch norm or autograd",
)
def check_sync_batch_norm(comm):
    runs = sync_bn_runs(comm, VISIBLE, seed=161)

    def expect_all():
        expect_results(runs)
        for run in runs:
            expect_messages(run)

    expect_on_every_rank(comm, expect_all)
