"""Tensor-parallel checks, run under ``mpiexec -n P python tensor_checks.py CHECK...``.

Oracles: the adjoint identity <F x, y> = <x, F* y> in float64 for every
differentiable collective (a replicated tensor counted once, per-rank tensors
summed over the ranks), and the serial layer computed by every rank itself for
every tensor-parallel layer. A failed assertion ends the job through minidl's
exception hook; a passing rank prints ``CHECK <name> OK rank <r>``.
"""

import sys

import numpy as np

import minidl as md
from minidl import dist, optim
from minidl import functional as F
from minidl import layers as L
from minidl.dist import tensor as tp
from minidl.perf.tensor_volume import gradient_bytes, tensor_volume
from tests.distributed.mpi_checks import run_named_checks

ADJOINT_TOL = 1e-12


def replicated(shape, seed):
    """The same float64 values on every rank."""
    return np.random.default_rng(seed).standard_normal(shape)


def per_rank(shape, seed, comm):
    """Different float64 values on each rank."""
    return np.random.default_rng([seed, comm.rank]).standard_normal(shape)


def dot(a, b, comm, is_replicated):
    """The inner product of the global tensors: counted once if replicated, else summed."""
    local = np.array([float(np.vdot(a, b))])
    if not is_replicated:
        comm.allreduce(local, op="sum")
    return local[0]


def adjoint(comm, fn, x, x_replicated, y, y_replicated):
    """Check <fn(x), y> = <x, fn*(y)> with fn* from backward."""
    xt = md.Tensor(x.copy(), requires_grad=True)
    out = fn(xt)
    assert out.shape == y.shape, (out.shape, y.shape)
    out.backward(y)
    left = dot(out.data, y, comm, y_replicated)
    right = dot(x, xt.grad, comm, x_replicated)
    scale = max(abs(left), 1.0)
    assert abs(left - right) <= ADJOINT_TOL * scale, (fn, left, right)


def check_adjoints(comm):
    n_rows, cols = 3, 7  # 7 columns: uneven blocks on 2, 3 and 4 ranks
    mine = tp.Split(cols, comm.size).sizes[comm.rank]
    full, block = (n_rows, cols), (n_rows, mine)
    cases = [
        (lambda t: tp.copy_to_group(t, comm), full, True, full, False),
        (lambda t: tp.reduce_from_group(t, comm), full, False, full, True),
        (lambda t: tp.all_gather(t, comm, -1, cols), block, False, full, False),
        (lambda t: tp.reduce_scatter(t, comm, -1), full, False, block, False),
        (lambda t: tp.gather_from_group(t, comm, 1, cols), block, False, full, True),
        (lambda t: tp.split_to_group(t, comm, 1), full, True, block, False),
    ]
    for seed, (fn, x_shape, x_rep, y_shape, y_rep) in enumerate(cases):
        x = replicated(x_shape, seed) if x_rep else per_rank(x_shape, seed, comm)
        y = replicated(y_shape, 100 + seed) if y_rep else per_rank(y_shape, 100 + seed, comm)
        adjoint(comm, fn, x, x_rep, y, y_rep)


def check_send_recv(comm):
    """Rank 0 sends x to the last rank: <y, g> on the receiver equals <x, grad x> on rank 0."""
    last = comm.size - 1
    x = replicated((4, 5), 1)
    g = replicated((4, 5), 2)
    if comm.rank == 0:
        xt = md.Tensor(x.copy(), requires_grad=True)
        tp.send(xt, comm, last, tag=3).backward()
        local = float(np.vdot(x, xt.grad))
    elif comm.rank == last:
        y = tp.recv(x.shape, x.dtype, comm, 0, tag=3)
        assert np.array_equal(y.data, x)
        y.backward(g)
        local = float(np.vdot(y.data, g))
    else:
        local = 0.0
    both = comm.allgather_object(local)
    assert abs(both[0] - both[last]) <= ADJOINT_TOL * max(abs(both[0]), 1.0), both


def check_traffic_counts_the_payload(comm):
    """all-gather hands the padded block, allreduce the whole array, to the collective."""
    tp.TRAFFIC.clear()
    cols = 7
    x = md.Tensor(per_rank((2, tp.Split(cols, comm.size).sizes[comm.rank]), 0, comm))
    tp.gather_from_group(x, comm, 1, cols)
    tp.reduce_from_group(md.Tensor(np.ones((2, 3))), comm)
    alone = comm.size == 1  # nothing travels
    assert tp.TRAFFIC["allgather"] == (0 if alone else 2 * tp.Split(cols, comm.size).largest * 8)
    assert tp.TRAFFIC["allreduce"] == (0 if alone else 2 * 3 * 8)


# ---- layers equal the serial layer -----------------------------------------------------
TOL = 1e-12


def compare(layer_name, serial_layer, parallel_layer, x, comm, out_split_axis=None, pairs=None):
    """Forward and backward through both; outputs, input gradients and the weight gradients of
    each (serial, parallel) layer of ``pairs`` (default: the two given) equal."""
    serial_layer.zero_grad()
    xs = md.Tensor(x.copy(), requires_grad=True)
    ys = serial_layer(xs)
    g = replicated(ys.shape, 77)
    ys.backward(g)
    xp_ = md.Tensor(x.copy(), requires_grad=True)
    yp = parallel_layer(xp_)
    if out_split_axis is None:
        np.testing.assert_allclose(yp.data, ys.data, rtol=0, atol=TOL, err_msg=layer_name)
        yp.backward(g)
    else:
        block = tp.Split(ys.shape[out_split_axis], comm.size).slice(comm.rank)
        index = (slice(None),) * out_split_axis + (block,)
        np.testing.assert_allclose(yp.data, ys.data[index], rtol=0, atol=TOL, err_msg=layer_name)
        yp.backward(np.ascontiguousarray(g[index]))
    np.testing.assert_allclose(xp_.grad, xs.grad, rtol=0, atol=TOL, err_msg=layer_name + " dx")
    for serial, parallel in pairs or [(serial_layer, parallel_layer)]:
        for name, axis in parallel.split.items():
            mine, full = getattr(parallel, name), getattr(serial, name)
            if mine is None:
                continue
            want = full.grad if axis is None else parallel.block(full.grad, axis)
            np.testing.assert_allclose(mine.grad, want, rtol=0, atol=TOL, err_msg=f"{name}")


def check_layers(comm):
    md.manual_seed(5)
    for n_in, n_out in ((7, 5), (4, 9), (8, 4)):
        linear = L.Linear(n_in, n_out).to("float64")
        x = replicated((3, n_in), n_in)
        for gather in (False, True):
            layer = tp.ColumnParallelLinear(linear, comm, gather_output=gather)
            compare("column", linear, layer, x, comm, None if gather else 1)
        layer = tp.RowParallelLinear(linear, comm, input_is_parallel=False)
        compare("row", linear, layer, x, comm)
    for c_in, c_out, k, stride, pad in ((5, 5, 3, 1, 1), (5, 6, 5, 2, 2), (4, 7, 11, 4, 0)):
        conv = L.Conv2d(c_in, c_out, k, stride=stride, padding=pad, algo="im2col").to("float64")
        x = replicated((2, c_in, 15, 13), c_in)
        for gather in (False, True):
            layer = tp.FilterParallelConv2d(conv, comm, gather_output=gather)
            compare("filter", conv, layer, x, comm, None if gather else 1)
        layer = tp.InputChannelParallelConv2d(conv, comm, input_is_parallel=False)
        compare("input-channel", conv, layer, x, comm)


def check_pairs(comm):
    """Column then row (one allreduce) and filter then input-channel equal the serial pair."""
    md.manual_seed(6)
    for widths in ((6, 7, 5), (5, 6, 3)):
        first, second = (L.Linear(a, b).to("float64") for a, b in zip(widths, widths[1:]))
        serial = L.Sequential(first, L.Tanh(), second)
        pair = L.Sequential(
            tp.ColumnParallelLinear(first, comm), L.Tanh(), tp.RowParallelLinear(second, comm)
        )
        tp.TRAFFIC.clear()
        x = replicated((4, widths[0]), 9)
        compare("column-row", serial, pair, x, comm, pairs=[(first, pair[0]), (second, pair[2])])
        if comm.size > 1:  # one allreduce forward (4 x 5 outputs) and one backward (4 x 6 inputs)
            assert tp.TRAFFIC["allreduce"] == 4 * (widths[0] + widths[2]) * 8, tp.TRAFFIC
    first = L.Conv2d(3, 5, 3, padding=1, algo="im2col").to("float64")
    second = L.Conv2d(5, 4, 3, algo="im2col").to("float64")
    serial = L.Sequential(first, L.ReLU(), L.MaxPool2d(2), second)
    pair = L.Sequential(
        tp.FilterParallelConv2d(first, comm),
        L.ReLU(),
        L.MaxPool2d(2),
        tp.InputChannelParallelConv2d(second, comm),
    )
    x = replicated((2, 3, 10, 10), 3)
    compare("filter-input", serial, pair, x, comm, pairs=[(first, pair[0]), (second, pair[3])])


def check_class_parallel_cross_entropy(comm):
    classes, n = 7, 6
    z = replicated((n, classes), 4)
    labels = np.random.default_rng(5).integers(0, classes, n)
    zs = md.Tensor(z.copy(), requires_grad=True)
    serial = F.cross_entropy(zs, labels)
    serial.backward()
    block = tp.Split(classes, comm.size).slice(comm.rank)
    zp = md.Tensor(z[:, block].copy(), requires_grad=True)
    loss = tp.class_parallel_cross_entropy(zp, labels, comm, classes)
    loss.backward()
    assert abs(loss.item() - serial.item()) <= TOL
    np.testing.assert_allclose(zp.grad, zs.grad[:, block], rtol=0, atol=TOL)


# ---- whole training runs on a dp x tp grid equal one process ---------------------------
STEPS, LR = 20, 0.05


def grid_shapes(size):
    """Every dp x tp grid with tp > 1 on ``size`` ranks."""
    return [(size // t, t) for t in range(2, size + 1) if size % t == 0]


def train_serial(make_model, data):
    model = make_model()
    opt = optim.Momentum(model.parameters(), lr=LR, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y).backward()
        opt.step()
    return model


def train_grid(make_model, data, comm, dp, tp_size, layout):
    """Each dp replica takes its contiguous share of every global batch."""
    grid = dist.Grid(comm, dp=dp, tp=tp_size)
    serial = make_model()
    parallel = tp.TensorParallel(serial, grid.group("tp"), layout and layout(serial))
    plain = optim.Momentum(parallel.module.parameters(), lr=LR, momentum=0.9)
    opt = dist.DistributedOptimizer(plain, grid.group("dp"), model=parallel.module)
    replica = grid.coords["dp"]
    tp.TRAFFIC.clear()
    for x, y in data:
        share = tp.Split(len(x), dp).slice(replica)
        opt.zero_grad()
        F.cross_entropy(parallel.module(md.Tensor(x[share])), y[share]).backward()
        opt.step()
    check_counted_volume(serial, parallel.plan, opt, data, grid, dp, tp_size)
    parallel.gather(serial)
    return serial


def check_counted_volume(serial, plan, opt, data, grid, dp, tp_size):
    """The bytes counted during training equal the formula of minidl.perf.tensor_volume."""
    x = data[0][0]
    local = tp.Split(len(x), dp).sizes[grid.coords["dp"]]
    per_step = tensor_volume(serial, plan, x.shape[1:], local, tp_size, 8)
    for kind, value in per_step.items():
        assert tp.TRAFFIC[kind] == value * len(data), (kind, tp.TRAFFIC[kind], value)
    rank = grid.coords["tp"]
    grads = gradient_bytes(serial, plan, tp_size, rank, 8)
    assert opt.stats["bytes_reduced"] == (grads * len(data) if dp > 1 else 0)


def compare_training(make_model, shape, comm, layouts=(tp.plan, tp.one_weird_trick_plan)):
    """Batches of 10: uneven shares of the batch on 3 and 4 ranks (one weird trick)."""
    data = [
        (replicated((10, *shape), 10 + s), np.random.default_rng(s).integers(0, 10, 10))
        for s in range(STEPS)
    ]
    want = dict(train_serial(make_model, data).named_parameters())
    for layout in layouts:
        for dp, tp_size in grid_shapes(comm.size):
            got = train_grid(make_model, data, comm, dp, tp_size, layout).named_parameters()
            for name, p in got:
                err = np.abs(p.data - want[name].data).max()
                assert err <= 1e-10, f"{layout} dp={dp},tp={tp_size} {name}: {err:.2e}"


def mlp():
    md.manual_seed(7)
    return md.models.mlp(in_features=36, hidden=(13, 11)).to("float64")


def lenet():
    md.manual_seed(8)
    return md.models.lenet5(conv_algo="im2col").to("float64")


def check_mlp_training(comm):
    compare_training(mlp, (1, 6, 6), comm)


def check_lenet_training(comm):
    compare_training(lenet, (1, 28, 28), comm)


def two_columns(groups):
    """A small network in the form of Krizhevsky et al. 2012's: grouped convolutions between
    ones that cross the columns, a response norm, and fully connected layers."""

    def make():
        md.manual_seed(9)
        return L.Sequential(
            L.Conv2d(1, 4 * groups, 3, padding=1, algo="im2col"),
            L.ReLU(),
            L.LocalResponseNorm(3, alpha=1e-3, beta=0.75, k=2.0),
            L.MaxPool2d(2),
            L.Conv2d(4 * groups, 2 * groups, 3, padding=1, groups=groups, algo="im2col"),
            L.ReLU(),
            L.Conv2d(2 * groups, 3, 3, algo="im2col"),
            L.ReLU(),
            L.Conv2d(3, 2 * groups, 1, algo="im2col"),
            L.Conv2d(2 * groups, 2 * groups, 1, groups=groups, algo="im2col"),
            L.Flatten(),
            L.Linear(2 * groups * 4, 7),
            L.Tanh(),
            L.Linear(7, 10),
        ).to("float64")

    return make


def check_group_layers(comm):
    md.manual_seed(12)
    conv = L.Conv2d(2 * comm.size, 3 * comm.size, 3, padding=1, groups=comm.size).to("float64")
    x = replicated((2, 2 * comm.size, 6, 5), 13)
    for gather in (False, True):
        layer = tp.GroupParallelConv2d(conv, comm, input_is_parallel=False, gather_output=gather)
        compare("group", conv, layer, x, comm, None if gather else 1)


def check_two_column_training(comm):
    """Grouped layers one group per rank, on every grid of the job (dp x tp, groups = tp)."""
    data = [
        (replicated((10, 1, 8, 8), 30 + s), np.random.default_rng(s).integers(0, 10, 10))
        for s in range(STEPS)
    ]
    for dp, tp_size in grid_shapes(comm.size):
        make = two_columns(tp_size)
        want = dict(train_serial(make, data).named_parameters())
        assert tp.plan(make(), tp_size)[4] == "group"
        for name, p in train_grid(make, data, comm, dp, tp_size, None).named_parameters():
            err = np.abs(p.data - want[name].data).max()
            assert err <= 1e-10, f"dp={dp},tp={tp_size} {name}: {err:.2e}"


def check_spatial_tp_training(comm):
    """dp=P/4 x spatial=2 x tp=2 (the grid engine's placement): LeNet-5's conv/pool front on
    halves of each image's rows, its fully connected tail split over tp, each replica on its
    share of the batch; 20 steps equal one process with the whole batch, the tp and dp bytes
    counted equal tensor_volume's; a plan splitting the front, and pp on this placement, are
    refused in one line."""
    from minidl.dist.parallelize import SpatialTensorPlacement, local_rows, place_on_grid
    from minidl.train.config import ConfigError

    data = [
        (replicated((10, 1, 28, 28), 40 + s), np.random.default_rng(s).integers(0, 10, 10))
        for s in range(STEPS)
    ]
    want = dict(train_serial(lenet, data).named_parameters())
    dp = comm.size // 4
    grid = dist.Grid(comm, dp=dp, spatial=2, tp=2)
    serial = lenet()
    parallel = SpatialTensorPlacement(serial, grid, 28)
    assert parallel.plan[:7] == [""] * 7 and parallel.plan[7] == "column", parallel.plan
    plain = optim.Momentum(parallel.module.parameters(), lr=LR, momentum=0.9)
    opt = dist.DistributedOptimizer(plain, grid.group("dp"), model=parallel.module)
    tp.TRAFFIC.clear()
    for x, y in data:
        share = tp.Split(len(x), dp).slice(grid.coords["dp"])
        opt.zero_grad()
        F.cross_entropy(parallel.module(md.Tensor(x[share])), y[share]).backward()
        opt.step()
    check_counted_volume(serial, parallel.plan, opt, data, grid, dp, 2)
    parallel.tensor.gather(serial)
    state = parallel.tensor.gather_state(plain.state_dict())["state"]
    for (name, p), mine in zip(serial.named_parameters(), state, strict=True):
        err = np.abs(p.data - want[name].data).max()
        assert err <= 1e-10, f"{grid.shape} {name}: {err:.2e}"
        assert mine["momentum_buffer"].shape == p.shape, name
    assert local_rows(data[0][0], grid.group("spatial")).shape[2] == 14
    try:
        SpatialTensorPlacement(lenet(), grid, 28, tp.plan(lenet()))
    except tp.PlacementError as error:
        message = str(error)
    else:
        message = ""
    assert "the first 6 layers run split over image rows (spatial)" in message, message
    refused_with_pp = "pipeline grids (pp) train in minidl.dist.pipeline's stages (with dp"
    for axis in ("tp", "spatial"):
        try:
            place_on_grid(lenet(), dist.Grid(comm, pp=2, **{axis: comm.size // 2}), None, 28)
        except ConfigError as error:
            message = str(error)
        else:
            message = ""
        assert refused_with_pp in message and "\n" not in message, message


def check_pipeline_tp_training(comm):
    """dp=P/4 x pp=2 x tp=2 from Python: ``PipelineTrainer`` over the pp group runs the stages
    of ``TensorParallel(model, tp group).module``, each tp rank sending its block of a split
    activation to the same tp rank of the next stage, each replica on its share of the batch;
    20 steps of LeNet-5 and of an MLP, 2 micro-batches, 1f1b, equal one process with the whole
    batch on each stage's parameters. ``fit`` refuses pp
    with spatial in one line before any work."""
    from minidl.dist.grid import GridShape
    from minidl.dist.pipeline import PipelineTrainer
    from minidl.train.config import ConfigError, TrainConfig

    try:
        dist.fit(
            TrainConfig(model="lenet5"),
            dist.DistConfig(grid=GridShape(pp=2, spatial=comm.size // 2)),
        )
    except ConfigError as error:
        message = str(error)
    else:
        message = ""
    assert "a pipeline (pp) trains through fit with dp and tp; spatial trains" in message, message

    data = [
        (replicated((10, 1, 28, 28), 50 + s), np.random.default_rng(s).integers(0, 10, 10))
        for s in range(STEPS)
    ]
    flat = [(x[:, :, :6, :6].copy(), y) for x, y in data]
    for make, batches in ((lenet, data), (mlp, flat)):
        want = dict(train_serial(make, batches).named_parameters())
        dp = comm.size // 4
        grid = dist.Grid(comm, dp=dp, pp=2, tp=2)
        serial = make()
        parallel = tp.TensorParallel(serial, grid.group("tp"))
        trainer = PipelineTrainer(
            parallel.module,
            grid.group("pp"),
            micro_batches=2,
            schedule="1f1b",
            optimizer=lambda ps: optim.Momentum(ps, lr=LR, momentum=0.9),
            data_parallel=grid.group("dp"),
        )
        for x, y in batches:
            share = tp.Split(len(x), dp).slice(grid.coords["dp"])
            trainer.step(x[share], y[share], len(x))
        parallel.gather(serial)
        mine = {name for chunk in trainer.chunks for name, _ in chunk.named_parameters()}
        assert mine, "every stage of these models holds parameters"
        for name, p in serial.named_parameters():
            if name in mine:
                err = np.abs(p.data - want[name].data).max()
                assert err <= 1e-10, f"{grid.shape} {make.__name__} {name}: {err:.2e}"


def check_grid_refusals(comm):
    """The grid engine's placement refuses what cannot run, in one line saying what fits."""
    from minidl.dist.parallelize import place_on_grid
    from minidl.train.config import ConfigError

    narrow = L.Sequential(L.Linear(4, 2), L.ReLU(), L.Linear(2, 5))
    grid = dist.Grid(comm, tp=comm.size)
    try:
        place_on_grid(narrow, grid, None, 28)
    except ConfigError as error:
        message = str(error)
    else:
        message = ""
    want = f"tp={comm.size} is wider than layer 0 (Linear(4, 2, bias=True)), which has 2 to split"
    assert want in message and "tp <= 2 fits" in message and "\n" not in message, message


def check_shares_only(comm):
    """On tp=2 and pp=2 (and dp x each on 4 ranks) a rank of a ``minidl train`` run, once its
    layout is placed, holds the parameters of its blocks or its stage and nothing more: the
    live ``Parameter`` arrays of the process add up to the share worked out from the serial
    shapes (a split layer's weight: its rows or columns of the rank's block; a stage: its
    layers'), so a serial model kept beside the blocks, or another stage's layers, fail."""
    import gc
    import tempfile

    from minidl.dist.grid import GridShape
    from minidl.dist.parallelize import parallelize
    from minidl.dist.tensor.placement import split_widths
    from minidl.layers import Parameter
    from minidl.train.config import TrainConfig
    from minidl.train.run import TrainingRun

    dp = comm.size // 2
    for axis in ("tp", "pp"):
        shape = GridShape(dp=dp, **{axis: 2})
        grid = dist.Grid(comm, **{"dp": dp, axis: 2})
        rank = grid.coords[axis]
        serial = lenet()
        if axis == "tp":
            plan = tp.plan(serial, 2)
            block = {
                path: tp.Split(width, 2).sizes[rank] / width
                for width, path, _ in split_widths(serial, plan)
            }
            kinds = dict(zip((p for p, _ in L.leaves(serial)), plan))
            want = sum(
                p.size
                * (
                    block[path]
                    if path in block
                    and not (name == "bias" and kinds[path].startswith(("row", "input")))
                    else 1
                )
                for path, layer in L.leaves(serial)
                for name, p in layer.named_parameters()
            )
        out = comm.bcast_object(tempfile.mkdtemp(prefix="minidl-shares-"))
        config = TrainConfig(model="lenet5", subset=64, test_subset=64, batch_size=16, out=out)
        with TrainingRun(config, comm) as run:
            training = parallelize(run, dist.DistConfig(grid=shape).check(config))
            if axis == "pp":  # the layers of the stage the run cut for this rank
                start, stop = training.placement.trainer.partition.bounds[rank]
                want = sum(p.size for i in range(start, stop) for p in serial[i].parameters())
            del serial
            run.begin(training)
            gc.collect()
            held = sum(o.data.size for o in gc.get_objects() if isinstance(o, Parameter))
            assert held == want, f"{shape} rank {comm.rank}: {held} parameters held, {want} wanted"


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
