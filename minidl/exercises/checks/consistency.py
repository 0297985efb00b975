"""Checks of the consistency exercises: the SSP gate, the parameter server, EASGD, model averaging.

Oracles: the tuned ``minidl.dist`` twins (``ClockTable``, ``elastic_difference``),
synchronous SGD on the whole batch, the closed form of asynchronous SGD
(every pushed gradient applied exactly once), and the papers' formulas
written over stacked replicas.
"""

import sys
import time
import traceback

import numpy as np

from minidl.dist.consistency import averaging as tuned_averaging
from minidl.dist.consistency.averaging import elastic_difference
from minidl.dist.consistency.ssp import ClockTable
from minidl.exercises import exercise, expect_close, expect_equal, expect_true
from minidl.exercises.checks.tuned import call_leaving, forbids
from minidl.reference.dist import averaging, parameter_server, ssp

REFERENCE = "minidl/reference/dist/"
WHY = "each worker holds its replica and the center between the steps"


@exercise(
    "8.1",
    "SSP: the clock gate",
    path=REFERENCE + "ssp.py",
    hint="a worker may start while the slowest clock is at least its own clock minus S; "
    "with no bound (None) it always may",
)
@forbids(ClockTable, name="minidl's tuned ClockTable")
def check_ssp_gate():
    rng = np.random.default_rng(81)
    workers = 4
    for staleness in (0, 1, 3, None):
        for _ in range(30):
            mine, tuned = ssp.WorkerClocks(workers, staleness), ClockTable(workers, staleness)
            for worker, ticks in enumerate(rng.integers(0, 8, workers)):
                for _ in range(ticks):
                    mine.tick(worker)
                    tuned.tick(worker)
            for clock in range(12):
                expect_equal(
                    f"may_start({clock}) with worker clocks {mine.clocks} and S = {staleness}",
                    bool(mine.may_start(clock)),
                    tuned.may_start(clock),
                )


# ---- 8.2: the parameter server, on 3 ranks ----------------------------------------------------
PS_STEPS, PS_LR, PS_BATCH, PS_DIM = 6, 0.1, 8, 5
STRAGGLER_DELAY = 0.005  # seconds; worker 2 computes slower, so an ungated server shows


def _shard(rank):
    """Worker ``rank``'s least-squares data (X, y), the same on every rank that builds it."""
    rng = np.random.default_rng([82, rank])
    return rng.standard_normal((PS_BATCH, PS_DIM)), rng.standard_normal(PS_BATCH)


def _least_squares_gradient(x, y, w):
    """The gradient of (1 / 2b) ||X w - y||^2."""
    return x.T @ (x @ w - y) / len(y)


def start_weights():
    return np.random.default_rng(820).standard_normal(PS_DIM)


def synchronous_sgd(workers):
    """The oracle of bsp: SGD on the union of the workers' batches, in one process."""
    w = start_weights()
    shards = [_shard(rank) for rank in range(1, workers + 1)]
    for _ in range(PS_STEPS):
        w = w - PS_LR * np.mean([_least_squares_gradient(x, y, w) for x, y in shards], axis=0)
    return w


def _or_abort(comm, role):
    """Run ``role()``; on an error print it and abort every rank (the others would wait forever)."""
    try:
        return role()
    except Exception:  # noqa: BLE001 (any failure must end every rank)
        sys.stderr.write(
            f"rank {comm.rank} of {comm.size} failed; aborting every rank so that "
            f"none waits forever for its messages:\n{traceback.format_exc()}"
        )
        comm.abort(1)


def run_parameter_server(comm, clocks, delay=STRAGGLER_DELAY):
    """Serve (rank 0, with the clock table ``clocks``) or work (ranks 1..n) for PS_STEPS steps.

    Worker 2 sleeps ``delay`` seconds before each gradient. Returns, on every
    rank alike: the server's final weights, its log, and the sum of every
    gradient the workers pushed.
    """
    workers = comm.size - 1
    weights, log = start_weights(), None
    pushed = np.zeros(PS_DIM)
    if comm.rank == 0:
        update = parameter_server.sgd_update(PS_LR / workers)
        weights, log = _or_abort(
            comm, lambda: parameter_server.serve(comm, weights, update, clocks)
        )
    else:
        x, y = _shard(comm.rank)

        def gradient(w, step):
            if comm.rank == 2:
                time.sleep(delay)
            g = _least_squares_gradient(x, y, w)
            pushed[:] += g
            return g

        _or_abort(comm, lambda: parameter_server.work(comm, weights, gradient, PS_STEPS))
    comm.bcast(weights, root=0)
    comm.allreduce(pushed, op="sum")
    return weights, comm.bcast_object(log, root=0), pushed


def expect_each_update_once(log, workers, mode):
    """Every worker's PS_STEPS gradients were applied, each exactly once."""
    expect_equal(
        f"{mode}: the (worker, clock) of every update the server applied",
        sorted((int(w), int(c)) for w, c, _ in log),
        [(w, c) for w in range(workers) for c in range(PS_STEPS)],
    )


@exercise(
    "8.2",
    "Parameter server: push, apply, gated pull",
    path=REFERENCE + "parameter_server.py",
    ranks=3,
    timeout=30,
    hint="the worker sends [rank, PUSH, gradient] and receives the weights; the server "
    "applies and logs the update, ticks the worker's clock, then sends the weights "
    "to every waiting worker whose gate is open and notes the version it read",
)
def check_parameter_server(comm):
    expect_true(
        "the parameter-server check needs a server and at least one worker",
        comm.size >= 2,
        detail=f"it runs on {comm.size} rank(s)",
    )
    workers = comm.size - 1
    weights, log, _ = run_parameter_server(comm, ClockTable(workers, 0))
    expect_close(
        "bsp: the server's weights against synchronous SGD on the whole batch",
        weights,
        synchronous_sgd(workers),
        rtol=1e-10,
        atol=1e-12,
    )
    expect_each_update_once(log, workers, "bsp")
    worst = max(s for _, _, s in log)
    expect_true(
        "bsp: no gradient may be more stale than the other workers' gradients of its clock",
        worst <= workers - 1,
        detail=f"staleness {worst} > {workers - 1} (n - 1); log {log}",
    )

    logs = {}
    for mode, staleness, delay in (
        (f"ssp:{SSP_S}", SSP_S, SSP_DELAY),
        ("asp", None, STRAGGLER_DELAY),
    ):
        weights, log, pushed = run_parameter_server(comm, ClockTable(workers, staleness), delay)
        expect_close(
            f"{mode}: the server's weights against w0 - (lr / n) * (sum of every pushed gradient)",
            weights,
            start_weights() - PS_LR / workers * pushed,
            rtol=1e-10,
            atol=1e-12,
            from_code=True,
        )
        expect_each_update_once(log, workers, mode)
        logs[mode] = log
    expect_gate_from_both_sides(logs[f"ssp:{SSP_S}"], workers)


SSP_S = 1
SSP_DELAY = 0.05  # seconds of worker 2 per gradient under ssp: time for the other to run ahead


def leads(log, workers):
    """For each update of the log, in order: how many clocks its worker was ahead of the
    slowest other worker when the server applied it (its clock minus their least clock)."""
    applied, out = [0] * workers, []
    for worker, clock, _ in log:
        others = [n for w, n in enumerate(applied) if w != worker]
        out.append(int(clock) - min(others, default=int(clock)))
        applied[int(worker)] += 1
    return out


def expect_gate_from_both_sides(log, workers):
    """The server's ``log`` under ssp:S with a straggler: the gate held a fast worker at most S
    clocks ahead and let it get there, and the staleness logged is seen, within SSP's bound
    (n - 1)(2S + 1)."""
    ahead, staleness = max(leads(log, workers)), [int(s) for _, _, s in log]
    expect_true(
        f"ssp:{SSP_S}: a worker applies clock c only while the slowest is at c - {SSP_S} or later",
        ahead <= SSP_S,
        detail=f"a worker ran {ahead} clocks ahead (log {log}): answer a pull only when "
        "clocks.may_start allows it",
    )
    expect_true(
        f"ssp:{SSP_S}: the fast worker runs ahead of the straggler (up to {SSP_S} clocks)",
        ahead > 0,
        detail=f"no worker ever pushed a clock before the others finished theirs (log {log}): "
        "a server that waits for every worker is bsp; answer each waiting worker whose gate "
        "is open at once",
    )
    bound = (workers - 1) * (2 * SSP_S + 1)
    expect_true(
        f"ssp:{SSP_S}: the logged staleness (updates applied between a worker's read and its "
        f"update) is seen and at most (n - 1)(2S + 1) = {bound}",
        0 < max(staleness) <= bound,
        detail=f"staleness {staleness}: log the version at the update minus the version the "
        "worker last pulled",
    )


# ---- 8.3 and 8.4: EASGD and model averaging, in one process -----------------------------------
def _replicas(rng, n, dim):
    return [rng.standard_normal(dim) for _ in range(n)]


@exercise(
    "8.3",
    "EASGD: elastic worker and center updates",
    path=REFERENCE + "averaging.py",
    hint="every worker moves by its gradient plus rho times its distance to the old "
    "center; the center moves by lr * rho times the sum of those distances",
)
@forbids(tuned_averaging, name="minidl's tuned averaging (minidl.dist.consistency.averaging)")
def check_easgd():
    rng = np.random.default_rng(83)
    n, dim, lr, rho = 3, 6, 0.1, 0.5
    workers, center, grads = (
        _replicas(rng, n, dim),
        rng.standard_normal(dim),
        _replicas(rng, n, dim),
    )
    new_workers, new_center = call_leaving(
        "synchronous EASGD",
        averaging.easgd_step,
        {"workers": workers, "center": center, "gradients": grads},
        WHY,
        lr=lr,
        rho=rho,
    )
    x, g = np.stack(workers), np.stack(grads)
    alpha, beta = lr * rho, n * lr * rho
    expect_close(
        "synchronous EASGD: the workers, against x_i - lr g_i - alpha (x_i - x~)",
        np.stack(new_workers),
        x - lr * g - alpha * (x - center),
        rtol=1e-12,
    )
    expect_close(
        "synchronous EASGD: the center, against (1 - beta) x~ + beta mean_i x_i",
        new_center,
        (1 - beta) * center + beta * x.mean(axis=0),
        rtol=1e-12,
    )
    still, _ = averaging.easgd_step(workers, center, [0 * g for g in grads], lr, rho=0.0)
    expect_close(
        "synchronous EASGD with rho = 0 and zero gradients leaves the workers",
        np.stack(still),
        x,
        rtol=0,
        atol=0,
    )

    local, alpha = rng.standard_normal(dim).astype(np.float32), np.float32(0.3)
    new_local, new_center = call_leaving(
        "asynchronous exchange",
        averaging.elastic_exchange,
        {"local": local, "center": center.astype(np.float32)},
        WHY,
        alpha=alpha,
    )
    difference = elastic_difference(local, center.astype(np.float32), alpha)
    expect_close(
        "asynchronous exchange: the worker, against x_i - alpha (x_i - x~)",
        new_local,
        local - difference,
        rtol=1e-6,
    )
    expect_close(
        "asynchronous exchange: the center, against x~ + alpha (x_i - x~)",
        new_center,
        center.astype(np.float32) + difference,
        rtol=1e-6,
    )


@exercise(
    "8.4",
    "Model averaging every H local steps",
    path=REFERENCE + "averaging.py",
    hint="take one SGD step on every replica; after every H-th step replace every "
    "replica by the replicas' mean",
)
@forbids(tuned_averaging, name="minidl's tuned averaging (minidl.dist.consistency.averaging)")
def check_model_averaging():
    rng = np.random.default_rng(84)
    start, targets = _replicas(rng, 3, 4), np.stack(_replicas(rng, 3, 4))
    lr, steps = 0.05, 7

    def gradient(i, w, t):
        """Replica i pulls towards its own target, a little harder every step."""
        return (1 + 0.1 * t) * (w - targets[i])

    for period in (1, 3, steps, steps + 1):
        w = np.stack(start)
        for t in range(steps):
            w = w - lr * (1 + 0.1 * t) * (w - targets)
            if (t + 1) % period == 0:
                w[:] = w.mean(axis=0)
        got = call_leaving(
            f"the {len(start)} replicas, averaged every {period}",
            averaging.local_sgd,
            {"replicas": start},
            WHY,
            gradient=gradient,
            lr=lr,
            period=period,
            steps=steps,
        )
        expect_close(
            f"the {len(start)} replicas after {steps} steps, averaged every {period}",
            np.stack(got),
            w,
            rtol=1e-12,
        )
