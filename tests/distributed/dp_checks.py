"""Synchronous data-parallel checks, run under ``mpiexec -n N python dp_checks.py CHECK``.

The oracle is the exact invariant of synchronous data parallelism: n ranks
with local batch b apply the same updates as one process with batch n*b.
Every rank computes that single-process reference itself (it can see the
whole global batch) and compares.
"""

import sys

import numpy as np
from mpi_checks import digests, run_named_checks

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.dist import DistributedOptimizer

STEPS, LOCAL_BATCH = 5, 4


def relative_error(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def lenet(seed):
    md.manual_seed(seed)
    return md.models.lenet5(conv_algo="im2col")


def global_batches(size, steps=STEPS, batch=LOCAL_BATCH, seed=0):
    rng = np.random.default_rng(seed)
    n = batch * size
    return [
        (rng.standard_normal((n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, n))
        for _ in range(steps)
    ]


def sgd_step(model, opt, x, y, dp=None, global_count=None):
    if dp is not None and global_count is not None:
        dp.set_batch_weight(len(y), global_count)
    opt.zero_grad()
    F.cross_entropy(model(md.Tensor(x)), y).backward()
    opt.step()


def reference(batches, seed=0):
    """One process, the whole global batch per step, from the weights of ``lenet(seed)``."""
    model = lenet(seed)
    opt = optim.Momentum(model.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches:
        sgd_step(model, opt, x, y)
    return model


def shard(comm, array):
    return np.array_split(array, comm.size)[comm.rank]


def assert_matches(model, ref, tol, what):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        err = relative_error(p.numpy(), q.numpy())
        assert err <= tol, f"{what}: {name} differs from one process with n*b by {err:.2e}"


def check_rank_idiom(comm):
    """Each rank's gradient is its rank: after averaging, every update is (size-1)/2 exactly."""
    model = lenet(comm.rank)
    opt = DistributedOptimizer(optim.SGD(model.parameters(), lr=1.0), comm, bucket_mb=0.01)
    before = [p.numpy().copy() for p in model.parameters()]
    for p in model.parameters():
        p.grad = np.full(p.shape, comm.rank, dtype=p.dtype)
    opt.step()
    for b, p in zip(before, model.parameters()):
        assert (p.numpy() == b - (comm.size - 1) / 2).all()


def check_equivalence(comm):
    """5 steps of momentum SGD equal one process with n times the batch (<= 1e-5 relative)."""
    batches = global_batches(comm.size)
    ref = reference(batches, seed=100)  # the weights rank 0 starts from and broadcasts
    for overlap, bucket_mb, algorithm in (
        (True, 0.01, "auto"),
        (False, 4, "mpi"),
        (True, 0.05, "rabenseifner"),
        (True, 1, "ring"),
    ):
        model = lenet(100 + comm.rank)  # replicas start different: the broadcast must fix it
        opt = DistributedOptimizer(
            optim.Momentum(model.parameters(), lr=0.05, momentum=0.9),
            comm,
            allreduce=algorithm,
            bucket_mb=bucket_mb,
            overlap=overlap,
            model=model,
        )
        for x, y in batches:
            sgd_step(model, opt, shard(comm, x), shard(comm, y))
        assert_matches(model, ref, 1e-5, f"overlap={overlap} {algorithm}")
        params = np.concatenate([p.numpy().ravel() for p in model.parameters()])
        assert len(set(digests(comm, params))) == 1, "replicas are not bit-identical"
        assert opt.stats["steps"] == STEPS and opt.stats["bytes_reduced"] > 0


def check_uneven_last_batch(comm):
    """A global batch that does not split evenly (one rank may even get nothing)."""
    for count in (comm.size * LOCAL_BATCH - 1, comm.size - 1):
        x, y = global_batches(comm.size)[0]
        x, y = x[:count], y[:count]
        ref = reference([(x, y)])
        model = lenet(0)
        opt = DistributedOptimizer(optim.Momentum(model.parameters(), lr=0.05), comm, model=model)
        xs, ys = shard(comm, x), shard(comm, y)
        if len(ys):
            sgd_step(model, opt, xs, ys, dp=opt, global_count=count)
        else:  # an empty shard still joins the allreduce, contributing zero
            opt.zero_grad()
            opt.step()
        assert_matches(model, ref, 1e-5, f"global batch of {count}")


def check_gradient_accumulation(comm):
    """Two backward passes before one step: the accumulated gradients are what gets averaged."""
    batches = global_batches(comm.size, steps=2)
    ref = reference(batches)
    model = lenet(0)
    opt = DistributedOptimizer(
        optim.Momentum(model.parameters(), lr=0.05, momentum=0.9), comm, bucket_mb=0.02, model=model
    )
    for x, y in batches:
        xs, ys = shard(comm, x), shard(comm, y)
        opt.zero_grad()
        for half in (slice(0, len(ys) // 2), slice(len(ys) // 2, None)):
            loss = F.cross_entropy(model(md.Tensor(xs[half])), ys[half], reduction="sum")
            (loss * (1.0 / len(ys))).backward()
        opt.step()
    assert_matches(model, ref, 1e-5, "accumulated gradients")


def check_optimizer_interface(comm):
    """The wrapper is driven like its optimizer: an LR schedule, params, state, state dicts.

    Oracle: a plain optimizer under the same schedule on the global batch.
    """
    batches = global_batches(comm.size, steps=3)
    ref_model = lenet(0)
    ref = optim.Momentum(ref_model.parameters(), lr=0.05, momentum=0.9)
    ref_schedule = optim.StepLR(ref, step_size=1, gamma=0.5)
    model = lenet(0)
    inner = optim.Momentum(model.parameters(), lr=0.05, momentum=0.9)
    opt = DistributedOptimizer(inner, comm, bucket_mb=0.02, model=model)
    schedule = optim.StepLR(opt, step_size=1, gamma=0.5)
    for x, y in batches:
        sgd_step(ref_model, ref, x, y)
        ref_schedule.step()
        sgd_step(model, opt, shard(comm, x), shard(comm, y))
        schedule.step()
        assert opt.lr == inner.lr == ref.lr
    assert_matches(model, ref_model, 1e-5, "under a StepLR schedule")
    assert opt.params is inner.params and opt.state is inner.state
    opt.note = "mine"  # attributes set on the wrapper stay on it
    assert not hasattr(inner, "note") and not hasattr(opt, "momentum")
    fresh = DistributedOptimizer(optim.Momentum(lenet(0).parameters(), lr=1.0), comm)
    fresh.load_state_dict(opt.state_dict())
    assert fresh.lr == inner.lr and fresh.optimizer.momentum == 0.9
    for mine, theirs in zip(inner.state, fresh.state):
        assert mine.keys() == theirs.keys()
        assert all(np.array_equal(mine[k], theirs[k]) for k in mine)


def check_different_model(comm):
    """Rank 1 builds a wider layer: construction fails on every rank, naming rank 1."""
    md.manual_seed(0)
    model = md.models.mlp(hidden=(32 if comm.rank == 1 else 16,))
    DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), comm, model=model)


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
