"""ZeRO checks, run under ``mpiexec -n N python zero_checks.py CHECK``.

The oracle: ZeRO changes where the optimizer state, the gradients and the weights live, not
the update, so n ranks with local batch b equal one process with batch n*b. Every rank
computes that one-process reference itself (it sees the whole global batch), in float64.
"""

import gc
import sys
import weakref

import numpy as np
from mpi_checks import run_named_checks

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim, random
from minidl.dist import Grid, ZeroOptimizer
from minidl.dist.tensor import TensorParallel
from minidl.dist.tensor.layers import ShardedModule
from minidl.intmath import block_bounds, block_sizes

STEPS, LOCAL_BATCH = 20, 3
EMPTY_SHARE = (5, 11)  # steps whose global batch leaves the last rank no sample
RULES = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.05, weight_decay=1e-3),
    "momentum": lambda ps: optim.Momentum(ps, lr=0.05, momentum=0.9),
    "nesterov": lambda ps: optim.Nesterov(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adagrad": lambda ps: optim.AdaGrad(ps, lr=0.05),
    "rmsprop": lambda ps: optim.RMSProp(ps, lr=0.01),
    "adam": lambda ps: optim.Adam(ps, lr=0.01),
}


def model(seed=0, dropout=False):
    """An MLP of 7 + 35 + 5 + 6 + 6... parameters: no count divides evenly into 2 or 3 shards."""
    md.manual_seed(seed)
    middle = [L.Dropout(0.3)] if dropout else []
    return L.Sequential(
        L.Linear(7, 5), L.Tanh(), *middle, L.Linear(5, 6), L.ReLU(), L.Linear(6, 3)
    ).to("float64")


def batches(size, seed=1, empty=EMPTY_SHARE):
    """``STEPS`` global batches of ``LOCAL_BATCH`` rows per rank, except the steps ``empty``."""
    rng = np.random.default_rng(seed)
    counts = [size - 1 if step in empty else LOCAL_BATCH * size for step in range(STEPS)]
    return [(rng.standard_normal((n, 7)), rng.integers(0, 3, n)) for n in counts]


def train(net, opt, data, comm=None, weigh=None):
    """One process on every batch (``comm`` None), or this rank on its share of each, which
    may be empty: then it runs no forward, as the epoch loop does."""
    for step, (x, y) in enumerate(data):
        rows = slice(None) if comm is None else slice(*block_bounds(len(y), comm.size)[comm.rank])
        if weigh is not None:
            weigh(len(y[rows]), len(y))
        random.set_sample_keys([(step, i) for i in range(len(y))][rows])
        opt.zero_grad()
        if len(y[rows]):
            F.cross_entropy(net(md.Tensor(x[rows])), y[rows]).backward()
        opt.step()
    random.set_sample_keys(None)


def zero(net, make, comm, stage, **options):
    return ZeroOptimizer(make(net.parameters()), comm, stage=stage, model=net, **options)


def assert_equal(net, opt, want, plain, what):
    """``net``'s weights and ``opt``'s state (one-process layout) equal ``want``'s and
    ``plain``'s to 1e-10; a stage-3 model is gathered whole first."""
    if opt.stage == 3:
        opt.gather_model()
    for (key, p), q in zip(net.named_parameters(), want.parameters(), strict=True):
        err = np.abs(p.data - q.data).max()
        assert err <= 1e-10, f"{what} {key}: {err:.2e}"
    mine, theirs = opt.state_dict(), plain.state_dict()
    assert mine["hyper"] == theirs["hyper"], (mine["hyper"], theirs["hyper"])
    for a, b in zip(mine["state"], theirs["state"], strict=True):
        assert a.keys() == b.keys(), (what, a.keys(), b.keys())
        for key in a:
            assert np.allclose(a[key], b[key], rtol=0, atol=1e-10), (what, key)


def check_every_rule_equals_one_process(comm):
    """Stages 1, 2 and 3, every update rule, 20 steps (two with an empty share on the last
    rank): weights and optimizer state to 1e-10. In buckets of one parameter, where every
    ``Linear`` runs in tiles of one row at stages 2 and 3, and at stage 3 in one bucket too,
    where each layer is gathered whole."""
    data = batches(comm.size)
    for name, make in RULES.items():
        want = model()
        plain = make(want.parameters())
        train(want, plain, data)
        for stage, bucket_mb in ((1, 1e-4), (2, 1e-4), (3, 1e-4), (3, 4)):
            net = model()
            opt = zero(net, make, comm, stage, bucket_mb=bucket_mb)
            if bucket_mb < 1:
                assert len(opt.tiles) == (3 if stage > 1 else 0), opt.tiles
            train(net, opt, data, comm, opt.set_batch_weight)
            assert_equal(net, opt, want, plain, f"stage {stage} ({bucket_mb} MiB) {name}")


def check_reduce_scatter_in_place(comm):
    """``Communicator.reduce_scatter`` without ``out`` (stage 1's): each rank's share of the
    mean lands at the start of the array it sent, equal to what ``out`` receives."""
    counts = block_sizes(11, comm.size)
    sent = np.random.default_rng([5, comm.rank]).standard_normal(11)
    want = comm.reduce_scatter(sent.copy(), counts, np.empty(counts[comm.rank]), op="mean")
    got = comm.reduce_scatter(sent, counts, op="mean")
    assert np.shares_memory(got, sent) and np.array_equal(got, want), (got, want)


def check_a_first_step_without_samples_stops_the_job(comm):
    """Stage 3 on a rank whose first step holds no sample: it cannot know which layers the
    others gather, and says so; the job ends instead of hanging (the test runs it)."""
    net = model()
    opt = zero(net, lambda ps: optim.SGD(ps, lr=0.1), comm, 3)
    train(net, opt, batches(comm.size, empty=(0,))[:1], comm)


def check_stage3_recomputes_the_same_dropout_masks(comm):
    """Stage 3 inside recomputed segments (each layer's forward run three times a step), with
    dropout keyed by sample: Adam's 20 steps equal one process without either."""
    data = batches(comm.size)
    want = model(dropout=True)
    plain = optim.Adam(want.parameters(), lr=0.01)
    train(want, plain, data)
    net = L.Recompute(model(dropout=True), 2)
    opt = zero(net, lambda ps: optim.Adam(ps, lr=0.01), comm, 3)
    train(net, opt, data, comm, opt.set_batch_weight)
    assert_equal(net, opt, want, plain, "stage 3 recomputed, dropout")


def expected_shard(sizes, ranks, rank):
    """This rank's elements when each bucket of ``sizes`` elements is cut into ``ranks``
    blocks, the first ones one longer."""
    return sum(block_sizes(size, ranks)[rank] for size in sizes)


def check_shards_hold_a_share(comm):
    """Each rank's state covers its blocks only: of the flat vector as one bucket, or of each
    parameter as its own; stage 2 drops the whole gradients once reduce-scattered; stage 3
    holds no weight between steps, nor any gathered copy once a forward or backward is done."""
    sizes = [p.size for p in model().parameters()]
    one, each = [sum(sizes)], sizes  # the buckets of 4 MiB, and of 1e-4 MiB
    for stage, bucket_mb, buckets in ((2, 4, one), (2, 1e-4, each), (3, 1e-4, each), (3, 4, one)):
        net = model()
        opt = zero(net, lambda ps: optim.Adam(ps, lr=0.01), comm, stage, bucket_mb=bucket_mb)
        train(net, opt, batches(comm.size)[1:2], comm)
        shard = expected_shard(buckets, comm.size, comm.rank)
        assert opt.shard_size == shard, (stage, opt.shard_size, shard)
        assert sum(comm.allgather_object(opt.shard_size)) == sum(sizes)
        for key in ("exp_avg", "exp_avg_sq"):
            assert sum(s[key].size for s in opt.optimizer.state) == shard
        held = sum(p.data.nbytes for p in net.parameters())
        blocks = sum(piece.data.nbytes for piece in opt.optimizer.params)
        assert blocks == 8 * shard and held == (0 if stage == 3 else 8 * sum(sizes)), held
        gathered = []
        if stage == 3:  # every gathered copy: weak references, dead once nothing holds it
            gather = opt._gathered
            opt._gathered = lambda *args: keep(gathered, gather(*args))
        loss = net(md.Tensor(np.ones((2, 7)))).sum()
        assert_freed(net, gathered, stage, "forward")
        loss.backward()
        assert_freed(net, gathered, stage, "backward")
        assert all(p.grad is None for p in net.parameters()), "a whole gradient was kept"
        assert sum(piece.grad.size for piece in opt.optimizer.params) == shard


def keep(gathered, array):
    gathered.append(weakref.ref(array.base if array.base is not None else array))
    return array


def assert_freed(net, gathered, stage, what):
    if stage == 3:
        gc.collect()
        assert gathered and not any(ref() is not None for ref in gathered), what
        assert all(p.data.size == 0 for p in net.parameters()), what


def check_state_round_trip_and_resume(comm):
    """A gathered state loads into a one-process optimizer and back into the blocks of
    another stage; training on from either matches."""
    data = batches(comm.size)
    net = model()
    opt = zero(net, lambda ps: optim.Adam(ps, lr=0.01), comm, 3)
    train(net, opt, data[:10], comm, opt.set_batch_weight)
    state = opt.state_dict()
    opt.gather_model()
    weights = net.state_dict()
    one = model()
    one.load_state_dict(weights)
    alone = optim.Adam(one.parameters(), lr=0.01)
    alone.load_state_dict(state)
    train(one, alone, data[10:])
    for stage in (1, 3):
        again = model()
        again.load_state_dict(weights)
        resumed = zero(again, lambda ps: optim.Adam(ps, lr=0.01), comm, stage)
        resumed.load_state_dict(state)
        train(again, resumed, data[10:], comm, resumed.set_batch_weight)
        assert_equal(again, resumed, one, alone, f"resumed at stage {stage}")


def check_dp_axis_of_a_tensor_parallel_grid(comm):
    """dp=2, tp=2: each tp rank's blocks and their momentum sharded over its dp group at
    stages 1, 2 and 3; 20 steps equal one process with the whole batch (each block against
    the one-process parameter's)."""
    grid = Grid(comm, dp=2, tp=2)
    dp = grid.group("dp")
    data = batches(dp.size)
    make = lambda ps: optim.Momentum(ps, lr=0.05, momentum=0.9)  # noqa: E731
    want = model()
    plain = make(want.parameters())
    train(want, plain, data)
    serial = dict(want.named_parameters())
    for stage in (1, 2, 3):
        tensor = TensorParallel(model(), grid.group("tp"))
        net = tensor.module
        opt = zero(net, make, dp, stage)
        train(net, opt, data, dp, opt.set_batch_weight)
        if stage == 3:
            opt.gather_model()
        for path, layer in net.named_modules():
            for name, p in layer._parameters.items():
                whole = serial[f"{path}.{name}"].data
                axis = layer.split.get(name) if isinstance(layer, ShardedModule) else None
                block = whole if axis is None else layer.block(whole, axis)
                err = np.abs(p.data - block).max()
                assert err <= 1e-10, f"stage {stage} {path}.{name}: {err:.2e}"


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
