"""ZeRO checks, run under ``mpiexec -n N python zero_checks.py CHECK``.

The oracle: ZeRO changes where the optimizer state and the gradients live, not the
update, so n ranks with local batch b equal one process with batch n*b. Every rank
computes that one-process reference itself (it sees the whole global batch), in float64.
"""

import sys

import numpy as np
from mpi_checks import run_named_checks

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.dist import ZeroOptimizer

STEPS, LOCAL_BATCH = 20, 3
RULES = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.05, weight_decay=1e-3),
    "momentum": lambda ps: optim.Momentum(ps, lr=0.05, momentum=0.9),
    "nesterov": lambda ps: optim.Nesterov(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adagrad": lambda ps: optim.AdaGrad(ps, lr=0.05),
    "rmsprop": lambda ps: optim.RMSProp(ps, lr=0.01),
    "adam": lambda ps: optim.Adam(ps, lr=0.01),
}


def model(seed=0):
    """An MLP of 7 + 35 + 5 + 6 + 6... parameters: no count divides evenly into 2 or 3 shards."""
    md.manual_seed(seed)
    return L.Sequential(L.Linear(7, 5), L.Tanh(), L.Linear(5, 6), L.ReLU(), L.Linear(6, 3)).to(
        "float64"
    )


def batches(size, seed=1):
    rng = np.random.default_rng(seed)
    n = LOCAL_BATCH * size
    return [(rng.standard_normal((n, 7)), rng.integers(0, 3, n)) for _ in range(STEPS)]


def train(net, opt, data, rows=slice(None), weigh=None):
    for x, y in data:
        if weigh is not None:
            weigh(len(y[rows]), len(y))
        opt.zero_grad()
        F.cross_entropy(net(md.Tensor(x[rows])), y[rows]).backward()
        opt.step()


def check_every_rule_equals_one_process(comm):
    """Stage 1 and 2, every update rule, 20 steps: weights and optimizer state to 1e-10."""
    data = batches(comm.size)
    rows = slice(comm.rank * LOCAL_BATCH, (comm.rank + 1) * LOCAL_BATCH)
    for name, make in RULES.items():
        want = model()
        plain = make(want.parameters())
        train(want, plain, data)
        for stage in (1, 2):
            net = model()
            opt = ZeroOptimizer(make(net.parameters()), comm, stage=stage, bucket_mb=1e-4)
            train(net, opt, data, rows, opt.set_batch_weight)
            for (key, p), q in zip(net.named_parameters(), want.parameters()):
                err = np.abs(p.data - q.data).max()
                assert err <= 1e-10, f"stage {stage} {name} {key}: {err:.2e}"
            mine, theirs = opt.state_dict(), plain.state_dict()
            assert mine["hyper"] == theirs["hyper"], (mine["hyper"], theirs["hyper"])
            for a, b in zip(mine["state"], theirs["state"], strict=True):
                assert a.keys() == b.keys(), (name, a.keys(), b.keys())
                for key in a:
                    assert np.allclose(a[key], b[key], rtol=0, atol=1e-10), (stage, name, key)


def check_shards_hold_a_share(comm):
    """Each rank's state covers its block of the parameters only, the blocks tile them, and
    stage 2 drops the full gradients once they are reduce-scattered."""
    net = model()
    total = sum(p.size for p in net.parameters())
    opt = ZeroOptimizer(optim.Adam(net.parameters(), lr=0.01), comm, stage=2)
    train(net, opt, batches(comm.size)[:1], slice(comm.rank, comm.rank + 1))
    sizes = comm.allgather_object(opt.shard_size)
    assert sum(sizes) == total and max(sizes) - min(sizes) <= 1, sizes
    states = opt.optimizer.state
    assert sum(s["exp_avg"].size for s in states) == opt.shard_size
    assert sum(s["exp_avg_sq"].size for s in states) == opt.shard_size
    net(md.Tensor(np.ones((2, 7)))).sum().backward()
    assert all(p.grad is None for p in net.parameters()), "stage 2 kept a full gradient"
    assert sum(piece.grad.size for piece in opt.optimizer.params) == opt.shard_size


def check_state_round_trip_and_resume(comm):
    """A gathered state loads into a one-process optimizer and back into the shards; training
    on from either matches."""
    data = batches(comm.size)
    rows = slice(comm.rank * LOCAL_BATCH, (comm.rank + 1) * LOCAL_BATCH)
    net = model()
    opt = ZeroOptimizer(optim.Adam(net.parameters(), lr=0.01), comm, stage=1)
    train(net, opt, data[:10], rows, opt.set_batch_weight)
    state = opt.state_dict()
    weights = net.state_dict()
    one = model()
    one.load_state_dict(weights)
    alone = optim.Adam(one.parameters(), lr=0.01)
    alone.load_state_dict(state)
    train(one, alone, data[10:])
    again = model()
    again.load_state_dict(weights)
    resumed = ZeroOptimizer(optim.Adam(again.parameters(), lr=0.01), comm, stage=2)
    resumed.load_state_dict(state)
    train(again, resumed, data[10:], rows, resumed.set_batch_weight)
    for p, q in zip(again.parameters(), one.parameters()):
        assert np.abs(p.data - q.data).max() <= 1e-10


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
