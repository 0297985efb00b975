"""Spatial-parallel checks, run under ``mpiexec -n P python spatial_checks.py CHECK...``.

Oracles: the adjoint identity <F x, y> = <x, F* y> summed over the ranks, the
serial layer (and the serial LeNet-5 training) run by every rank on the whole
batch, and the halo formula of ``minidl.perf.halo_cost``. A failed assertion
ends the job through minidl's exception hook; a passing rank prints
``CHECK <name> OK rank <r>`` (``run_named_checks``), which the test counts.
"""

import itertools
import sys

import numpy as np

import minidl as md
from minidl import dist, optim
from minidl import functional as F
from minidl import layers as L
from minidl.dist.spatial import (
    GatherRows,
    HaloExchange,
    SumOverGroup,
    local_rows,
    spatial_parallel,
    split_rows,
)
from minidl.dist.spatial.layers import Blocks, SpatialConv2d, SpatialPool2d, step_bytes, window_args
from minidl.perf.halo_cost import halo_bytes, needed_rows
from minidl.perf.telemetry import RankCounters
from tests.distributed.mpi_checks import run_named_checks

# (name, layer, input shape): LeNet-5's and AlexNet's window layers, and odd heights
LAYERS = (
    ("lenet conv1 5x5 pad 2", lambda: L.Conv2d(1, 3, 5, padding=2), (2, 1, 28, 28)),
    ("lenet pool1 2x2", lambda: L.MaxPool2d(2), (2, 3, 28, 28)),
    ("lenet conv2 5x5", lambda: L.Conv2d(3, 4, 5), (2, 3, 14, 14)),
    ("lenet pool2 2x2 on 10 rows", lambda: L.MaxPool2d(2), (2, 4, 10, 10)),
    (
        "alexnet conv1 11x11/4 pad 2",
        lambda: L.Conv2d(3, 4, 11, stride=4, padding=2),
        (1, 3, 67, 40),
    ),
    ("alexnet 2012 conv1 11x11/4", lambda: L.Conv2d(3, 4, 11, stride=4), (1, 3, 227, 51)),
    ("alexnet pool 3x3/2", lambda: L.MaxPool2d(3, stride=2), (2, 3, 27, 27)),
    (
        "alexnet conv2 5x5 pad 2 groups 2",
        lambda: L.Conv2d(4, 6, 5, padding=2, groups=2),
        (1, 4, 27, 9),
    ),
    (
        "conv 3x3 pad 1 dilation 2 rect",
        lambda: L.Conv2d(2, 3, (3, 2), padding=(2, 1), dilation=2),
        (2, 2, 19, 7),
    ),
    ("avg pool 3x3/1 pad 1", lambda: L.AvgPool2d(3, stride=1, padding=1), (2, 2, 13, 8)),
    ("max pool 3x3/2 pad 1", lambda: L.MaxPool2d(3, stride=2, padding=1), (2, 2, 17, 8)),
)
ADJOINT_CASES = (
    (28, 5, 1, 2, 1),
    (227, 11, 4, 0, 1),
    (67, 11, 4, 2, 1),
    (13, 3, 1, 1, 2),
    (17, 3, 2, 1, 1),
)


def total(comm, value):
    return float(comm.allreduce(np.array([value], dtype=np.float64))[0])


def check_adjoint(comm):
    """<F x, y> = <x, F* y>, summed over the ranks, to 1e-12, for every Function here."""
    rng = np.random.default_rng([1, comm.rank])
    counters = RankCounters()
    for (height, kernel, stride, padding, dilation), axis in itertools.product(
        ADJOINT_CASES, (2, 3)
    ):
        rows = split_rows(height, comm.size)
        needs = needed_rows(height, kernel, stride, padding, dilation, comm.size)
        start, stop = rows[comm.rank]
        x = rng.standard_normal((2, 3, stop - start, 5))
        x = x if axis == 2 else np.ascontiguousarray(x.swapaxes(2, 3))  # split columns
        fn = HaloExchange()
        fx = fn.forward(
            x, comm=comm, needs=needs, rows=rows, pad_value=0.0, counters=counters, axis=axis
        )
        y = rng.standard_normal(fx.shape)
        left, right = total(comm, np.vdot(fx, y)), total(comm, np.vdot(x, fn.backward(y)))
        assert abs(left - right) <= 1e-12 * abs(left), ("halo", height, axis, left, right)
    # the gather and the group sum act between per-rank blocks and a replicated whole
    rows = split_rows(11, comm.size)
    x = rng.standard_normal((2, 3, rows[comm.rank][1] - rows[comm.rank][0], 4))
    y = np.random.default_rng(7).standard_normal((2, 3, 11, 4))  # the same on every rank
    fn = GatherRows()
    left = np.vdot(fn.forward(x, comm=comm, rows=rows, counters=counters), y)
    right = total(comm, np.vdot(x, fn.backward(y)))
    assert abs(left - right) <= 1e-12 * abs(left), ("gather", left, right)
    w = np.random.default_rng(8).standard_normal(6)  # replicated
    g = rng.standard_normal(6)
    fn = SumOverGroup()
    left = total(comm, np.vdot(fn.forward(w, comm=comm, counters=counters), g))
    right = np.vdot(w, fn.backward(g))
    assert abs(left - right) <= 1e-12 * abs(left), ("sum", left, right)


def close(what, got, expected, tol=1e-12):
    error = np.max(np.abs(got - expected)) / max(np.max(np.abs(expected)), 1e-300)
    assert error <= tol, f"{what}: relative error {error:.3g} > {tol}"


def check_layers(comm):
    """Each spatial layer's output and gradients equal the serial layer's, on every split of
    the ranks into row x column blocks; halo bytes sent = the formula."""
    group = comm.dup()
    for cols in (c for c in range(1, comm.size + 1) if comm.size % c == 0):
        blocks = Blocks(group, cols)
        for name, make, shape in LAYERS:
            name = f"{name}, {comm.size // cols}x{cols} blocks"
            md.manual_seed(5)
            layer = make().to("float64")
            rng = np.random.default_rng(9)
            x = rng.standard_normal(shape)
            serial_x = md.Tensor(x, requires_grad=True)
            serial_y = layer(serial_x)
            upstream = rng.standard_normal(serial_y.shape)
            serial_y.backward(upstream)
            expected = {n: p.grad.copy() for n, p in layer.named_parameters()}
            layer.zero_grad()
            counters = RankCounters()
            kind = SpatialConv2d if isinstance(layer, L.Conv2d) else SpatialPool2d
            spatial = kind(layer, blocks, shape[2:], counters)
            local_x = md.Tensor(local_rows(x, group, cols), requires_grad=True)
            local_y = spatial(local_x)
            close(f"{name}: output", local_y.data, local_rows(serial_y.data, group, cols))
            local_y.backward(local_rows(upstream, group, cols))
            close(f"{name}: input gradient", local_x.grad, local_rows(serial_x.grad, group, cols))
            for n, p in layer.named_parameters():
                close(f"{name}: gradient of {n}", p.grad, expected[n])
            sent = total(comm, counters.get("halo_bytes", 0))
            if cols == 1:
                predicted = halo_bytes(shape, *window_args(layer), comm.size, itemsize=8)
            else:
                model = L.Sequential(layer)
                predicted = step_bytes(model, shape, comm.size, 8, cols, input_grad=True)
                predicted = predicted["halo_bytes"]
            assert sent == predicted, f"{name}: {sent} halo bytes sent, formula {predicted}"


STEPS, BATCH, LR = 20, 6, 0.05
PREDICTED = ("halo_bytes", "gather_bytes", "grad_bytes")


def batches(seed=0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((BATCH, 1, 28, 28)), rng.integers(0, 10, BATCH)) for _ in range(STEPS)
    ]


def lenet():
    md.manual_seed(11)
    return md.models.lenet5().to("float64")


def train(model, data, prepare):
    opt = optim.Momentum(model.parameters(), lr=LR, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(prepare(x))), y).backward()
        opt.step()
    return model.state_dict()


def check_lenet(comm):
    """20 float64 steps of LeNet-5 split over rows give one process's weights to 1e-10; so do
    splits into row x column blocks; the bytes counted per step equal ``step_bytes``."""
    data = batches()
    expected = train(lenet(), data, lambda x: x)
    group = comm.dup()
    for cols in (c for c in range(2, comm.size + 1) if comm.size % c == 0):
        model = spatial_parallel(lenet(), group, 28, 28, cols)
        got = train(model, data, lambda x: local_rows(x, group, cols))
        for name in expected:
            what = f"LeNet-5 in {comm.size // cols}x{cols} blocks after {STEPS} steps: {name}"
            close(what, got[name], expected[name], 1e-10)
        sent = {key: total(comm, model.counters.get(key, 0)) / STEPS for key in PREDICTED}
        per_step = step_bytes(lenet(), (BATCH, 1, 28, 28), comm.size, 8, cols)
        assert sent == per_step, (cols, sent, per_step)
    model = spatial_parallel(lenet(), group, 28)
    got = train(model, data, lambda x: local_rows(x, group))
    assert list(got) == list(expected), (list(got), list(expected))
    for name in expected:
        close(f"LeNet-5 after {STEPS} steps: {name}", got[name], expected[name], 1e-10)
    # bytes per step: halos of the four window layers, as the formula counts them
    sizes = ((1, 28), (6, 28), (6, 14), (16, 10))
    args = ((5, 1, 2, 1), (2, 2, 0, 1), (5, 1, 0, 1), (2, 2, 0, 1))
    predicted = sum(
        halo_bytes((BATCH, c, h, h), *a, parts=comm.size, itemsize=8, input_grad=c > 1)
        for (c, h), a in zip(sizes, args)
    )
    sent = {key: total(comm, model.counters.get(key, 0)) for key in PREDICTED}
    assert sent["halo_bytes"] == predicted * STEPS, (sent, predicted * STEPS)
    per_step = step_bytes(lenet(), (BATCH, 1, 28, 28), comm.size, itemsize=8)
    assert {key: sent[key] / STEPS for key in PREDICTED} == per_step, (sent, per_step)


def check_alexnet(comm):
    """AlexNet-small (LRN between the convolutions; dropout in the replicated tail, drawn alike
    on every rank from the same seed) on 1x28x28 images: 5 float64 steps equal one process."""

    def alexnet():
        md.manual_seed(13)
        return md.models.alexnet(10, "small", in_channels=1).to("float64")

    data = batches()[:5]
    serial = alexnet()
    md.manual_seed(14)  # the dropout masks
    expected = train(serial, data, lambda x: x)
    group = comm.dup()
    model = spatial_parallel(alexnet(), group, 28)
    md.manual_seed(14)
    got = train(model, data, lambda x: local_rows(x, group))
    for name in expected:
        close(f"AlexNet-small on {comm.size} row blocks: {name}", got[name], expected[name], 1e-10)


def check_grid(comm):
    """dp=2 x spatial=P/2: data-parallel replicas of a row-split LeNet-5 give one process's
    weights for the batch of both replicas (the spatial model's gradients are whole before the
    data-parallel average)."""
    grid = dist.Grid(comm, dp=2, spatial=comm.size // 2)
    rows, replicas = grid.group("spatial"), grid.group("dp")
    data = [
        (np.concatenate([x, x[::-1] * 0.5]), np.concatenate([y, y[::-1]])) for x, y in batches()
    ]
    expected = train(lenet(), data, lambda x: x)
    model = spatial_parallel(lenet(), rows, 28)
    opt = dist.DistributedOptimizer(
        optim.Momentum(model.parameters(), lr=LR, momentum=0.9), replicas
    )
    mine = slice(replicas.rank * BATCH, (replicas.rank + 1) * BATCH)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(local_rows(x[mine], rows))), y[mine]).backward()
        opt.step()
    got = model.state_dict()
    for name in expected:
        close(f"dp=2,spatial={rows.size} LeNet-5: {name}", got[name], expected[name], 1e-10)


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
