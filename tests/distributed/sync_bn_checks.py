"""Synchronised batch-norm checks, run under ``mpiexec -n N python sync_bn_checks.py CHECK``.

The oracle: one process with the whole batch in float64. Every rank computes it itself (it
sees the whole batch) and compares its share of the outputs and input gradients, the summed
weight gradients, and the running statistics, to 1e-10.
"""

import sys

import numpy as np
from mpi_checks import run_named_checks

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.dist import DistributedOptimizer, Grid, ZeroOptimizer, convert_sync_batchnorm
from minidl.dist.spatial import local_rows, spatial_parallel
from minidl.intmath import block_bounds

SHAPES = {L.BatchNorm1d: [(3,), (3, 5)], L.BatchNorm2d: [(3, 4, 2)]}  # per-sample shapes


def close(a, b, what, tol=1e-10):
    err = np.abs(np.asarray(a) - np.asarray(b)).max()
    assert err <= tol, f"{what}: {err:.2e}"


def run_layer(layer, x, seed_weights, rows, total):
    """Two training steps and one evaluation of ``layer`` on ``x[rows]``; the loss is the sum
    of y * R over the rows divided by the whole batch's size, so each rank's gradients are its
    share of the whole batch's. Returns [(y, dx, dgamma, dbeta)] per step and the eval output."""
    rng = np.random.default_rng(seed_weights)
    layer.weight.data[:] = rng.uniform(0.5, 2, layer.num_features)
    layer.bias.data[:] = rng.standard_normal(layer.num_features)
    out = []
    for step in range(2):
        weights = np.random.default_rng([step, 7]).standard_normal(x.shape)[rows]
        xt = md.tensor(x[rows] * (step + 1), requires_grad=True, dtype="float64")
        layer.weight.grad = layer.bias.grad = None
        y = layer(xt)
        (y * md.tensor(weights / total, dtype="float64")).sum().backward()
        out.append((y.data, xt.grad, layer.weight.grad.copy(), layer.bias.grad.copy()))
    layer.eval()
    evaluated = layer(md.tensor(x[rows], dtype="float64")).data
    layer.train()
    return out, evaluated


def check_layer_equals_one_process(comm):
    """BatchNorm1d on (N, C) and (N, C, L), BatchNorm2d on NCHW, 7 samples over the ranks
    (uneven shares), the mean 50 times the spread: outputs, input gradients, summed weight
    gradients, running statistics and the evaluated output equal one process's."""
    for kind, shapes in SHAPES.items():
        for shape in shapes:
            total = 7
            x = 50 + np.random.default_rng(3).standard_normal((total, *shape))
            rows = slice(*block_bounds(total, comm.size)[comm.rank])
            want_layer = kind(shape[0], dtype="float64")
            want, want_eval = run_layer(want_layer, x, 1, slice(None), total)
            layer = kind(shape[0], dtype="float64", group=comm)
            got, got_eval = run_layer(layer, x, 1, rows, total)
            what = f"{kind.__name__}{shape}"
            for step, ((y, dx, dw, db), (wy, wdx, wdw, wdb)) in enumerate(zip(got, want)):
                close(y, wy[rows], f"{what} step {step} output")
                close(dx, wdx[rows], f"{what} step {step} input gradient")
                close(comm.allreduce(dw.copy()), wdw, f"{what} step {step} weight gradient")
                close(comm.allreduce(db.copy()), wdb, f"{what} step {step} bias gradient")
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                close(getattr(layer, name).data, getattr(want_layer, name).data, f"{what} {name}")
            close(got_eval, want_eval[rows], f"{what} evaluated")


def check_a_batch_of_one_value_per_channel_is_refused(comm):
    """One sample over the whole group: the one-line error on every rank, none hangs."""
    layer = L.BatchNorm1d(2, dtype="float64", group=comm)
    x = np.ones((1 if comm.rank == 0 else 0, 2))
    try:
        layer(md.tensor(x, dtype="float64"))
    except ValueError as error:
        assert f"over the {comm.size} ranks of its group" in str(error), error
    else:
        raise AssertionError("a group batch of one sample was not refused")


def check_float32_statistics_keep_their_digits(comm):
    """float32 samples of mean 1e4 and variance ~1 (mean^2 / Var = 1e8, past float32's 2^24):
    the joined variance within 1e-3 of float64's, where E[x^2] - E[x]^2 in float32 is off by
    more than the variance itself."""
    x = 1e4 + np.random.default_rng(4).standard_normal((4000, 2))
    rows = slice(*block_bounds(len(x), comm.size)[comm.rank])
    layer = L.BatchNorm1d(2, momentum=1.0, group=comm)
    layer(md.tensor(x[rows]))
    want = x.var(axis=0, ddof=1)
    close(layer.running_var.data / want, 1, "float32 running variance", tol=1e-3)
    x32 = x.astype(np.float32)
    naive = (x32 * x32).mean(axis=0) - x32.mean(axis=0) ** 2
    assert np.abs(naive - want).max() > want.min(), naive


def model(seed=0):
    md.manual_seed(seed)
    return L.Sequential(
        L.Conv2d(2, 3, 3, padding=1),
        L.BatchNorm2d(3),
        L.ReLU(),
        L.Flatten(),
        L.Linear(3 * 4 * 4, 5),
        L.BatchNorm1d(5),
        L.Linear(5, 3),
    ).to("float64")


def batches(size, steps=4, local=3):
    rng = np.random.default_rng(1)
    n = local * size
    return [(5 + rng.standard_normal((n, 2, 4, 4)), rng.integers(0, 3, n)) for _ in range(steps)]


def train(net, opt, data, comm=None):
    for x, y in data:
        rows = slice(None) if comm is None else slice(*block_bounds(len(y), comm.size)[comm.rank])
        opt.zero_grad()
        F.cross_entropy(net(md.tensor(x[rows], dtype="float64")), y[rows]).backward()
        opt.step()


def check_training_equals_one_process(comm):
    """A Conv-BN-ReLU-Linear-BN-Linear net, 4 momentum steps, synchronised over the ranks
    (DistributedOptimizer; ZeroOptimizer stages 1, 2, 3): every parameter and buffer equals one
    process with the whole batch; without synchronisation the running statistics differ."""
    make = lambda ps: optim.Momentum(ps, lr=0.1, momentum=0.9)  # noqa: E731
    data = batches(comm.size)
    want = model()
    train(want, make(want.parameters()), data)
    expected = want.state_dict()
    layouts = {
        "sync": lambda net: DistributedOptimizer(make(net.parameters()), comm, bucket_mb=1e-4),
        **{
            f"zero {s}": lambda net, s=s: ZeroOptimizer(make(net.parameters()), comm, s, model=net)
            for s in (1, 2, 3)
        },
    }
    for name, layout in layouts.items():
        net = convert_sync_batchnorm(model(), comm)
        opt = layout(net)
        train(net, opt, data, comm)
        if name == "zero 3":
            opt.gather_model()
        got = net.state_dict()
        for key in expected:
            close(got[key], expected[key], f"{name} {key}")
    plain = model()
    train(plain, DistributedOptimizer(make(plain.parameters()), comm), data, comm)
    err = np.abs(plain.state_dict()["1.running_mean"] - expected["1.running_mean"]).max()
    assert err > 1e-6, f"per-rank statistics gave the group's running mean ({err:.1e})"


def check_tail_of_a_spatial_grid_equals_one_process(comm):
    """dp=2 x spatial=2: the conv runs on row blocks, the tail (Linear, BatchNorm1d, Linear) on
    the gathered images, replicated over spatial; its batch norm synchronised over dp gives one
    process's weights and running statistics for the batch of both replicas."""
    grid = Grid(comm, dp=2, spatial=2)
    rows, replicas = grid.group("spatial"), grid.group("dp")

    def tail_model():
        md.manual_seed(0)
        layers = [L.Conv2d(2, 3, 3, padding=1), L.ReLU(), L.Flatten(), L.Linear(48, 5)]
        return L.Sequential(*layers, L.BatchNorm1d(5), L.Linear(5, 3)).to("float64")

    make = lambda ps: optim.Momentum(ps, lr=0.1, momentum=0.9)  # noqa: E731
    data = batches(2)
    want = tail_model()
    train(want, make(want.parameters()), data)
    net = spatial_parallel(convert_sync_batchnorm(tail_model(), replicas), rows, 4)
    opt = DistributedOptimizer(make(net.parameters()), replicas)
    for x, y in data:
        mine = slice(*block_bounds(len(y), 2)[replicas.rank])
        opt.zero_grad()
        xs = md.tensor(local_rows(x[mine], rows), dtype="float64")
        F.cross_entropy(net(xs), y[mine]).backward()
        opt.step()
    got, expected = net.state_dict(), want.state_dict()
    for key in expected:
        close(got[key], expected[key], f"dp=2,spatial=2 {key}")


def check_convert_keeps_names_and_values(comm):
    """Nested batch-norm layers all get the group; names, values and other layers unchanged."""
    net = L.Sequential(model(), L.Sequential(L.Linear(3, 4), L.BatchNorm1d(4)))
    before = {k: v.copy() for k, v in net.state_dict().items()}
    assert convert_sync_batchnorm(net, comm) is net
    after = net.state_dict()
    assert list(after) == list(before), (list(after), list(before))
    for key in before:
        assert np.array_equal(after[key], before[key]), key
    groups = {p: getattr(m, "group", "-") for p, m in net.named_modules()}
    assert groups["0.1"] is comm and groups["0.5"] is comm and groups["1.1"] is comm, groups
    assert groups["0.0"] == "-", groups
    assert convert_sync_batchnorm(net, None)._modules["1"]._modules["1"].group is None
    try:
        convert_sync_batchnorm(net, 2)
    except TypeError as error:
        assert "group must be a Communicator" in str(error), error
    else:
        raise AssertionError("a group that is no Communicator was accepted")


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
