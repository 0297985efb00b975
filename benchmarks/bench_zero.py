"""ZeRO on 2 ranks: bytes of parameters, gradients and optimizer state per rank, and step time.

    mpiexec -n 2 python benchmarks/bench_zero.py [--model alexnet] [--variant torchvision]
                                                 [--batch-size 16] [--rounds 5]

For plain sync data parallelism (``DistributedOptimizer``) and ZeRO stages 1, 2 and 3
(``ZeroOptimizer``), with momentum and with Adam, each rank trains the model on random data
(local batch ``--batch-size``, float32); in its second step it counts the bytes it holds,
distinct arrays by address (``distinct_bytes``), each view counted as the whole array it
views:

- parameters: the model's weights (under stage 3 the gathered copies, while a layer runs)
  and the optimizer's (ZeRO's blocks);
- gradients: the model's ``grad`` arrays, plain sync's bucket buffers, ZeRO's blocks of the
  averaged gradient, and what a reduce-scatter sends and receives;
- optimizer state: the arrays of its ``state``;

sampled as each gradient is accumulated (before ZeRO reduces it), at every collective
(with its buffers) and after the step; it prints the largest total and its parts, next to
one process's P + P + K P (P parameter bytes, K state arrays per parameter: momentum 1,
Adam 2) and to the ZeRO paper's formula (Rajbhandari et al. 2020) for n ranks: stage 1
P + P + K P / n, stage 2 P + P / n + K P / n, stage 3 (P + P + K P) / n. Then each stage's
steps alternate with plain sync's, ``--rounds`` of each: the median step times, the median
ratio round by round, the seconds in collectives and the bytes a step moves.
"""

import argparse
import statistics
import time
import weakref

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.dist import DistributedOptimizer, ZeroOptimizer
from minidl.models.alexnet import IMAGE_SIZE
from minidl.perf.graph_memory import distinct_bytes
from minidl.pool import HOST_POOL, default_limit

RULES = {  # name: (the optimizer, its state arrays per parameter)
    "momentum": (lambda ps: optim.Momentum(ps, lr=1e-3, momentum=0.9), 1),
    "adam": (lambda ps: optim.Adam(ps, lr=1e-4), 2),
}
COLLECTIVES = {"reduce_scatter": "grads", "allgatherv": "params", "iallreduce": "grads"}


def build(name, variant):
    md.manual_seed(0)
    if name == "alexnet":
        size = IMAGE_SIZE[variant]
        return md.models.alexnet(num_classes=1000, variant=variant), (3, size, size)
    return md.models.lenet5(), (1, 28, 28)


class Census:
    """The bytes this rank holds, by kind, when ``sample`` is called while ``sampling``; the
    moment of the largest total is kept. ``comm``'s collectives are wrapped to time them and to
    sample with their buffers; the arrays an all-gather fills are followed (weak references,
    the buffer pool off while sampling) for as long as anything holds them: stage 3's gathered
    copies, which a layer's graph keeps until its backward ends."""

    def __init__(self, comm):
        self.comm_seconds, self.sampling = 0.0, False
        for name, kind in COLLECTIVES.items():
            setattr(comm, name, self._wrap(getattr(comm, name), kind))

    def watch(self, params, inner, opt):
        self.params, self.inner, self.opt = params, inner, opt
        self.peak, self.gathered = (0, {}), []

    def _wrap(self, collective, kind):
        def wrapped(array, *args, **kwargs):
            buffers = [a for a in (array, *args, *kwargs.values()) if hasattr(a, "nbytes")]
            if self.sampling and kind == "params":
                self.gathered.append(weakref.ref(_owner(array)))
            self.sample(**{kind: buffers})
            start = time.perf_counter()
            result = collective(array, *args, **kwargs)
            self.comm_seconds += time.perf_counter() - start
            return result

        return wrapped

    def sample(self, _=None, params=(), grads=()):
        if not self.sampling:
            return
        pieces = self.inner.params
        gathered = [a for a in (ref() for ref in self.gathered) if a is not None]
        arrays = {
            "params": [p.data for p in self.params + pieces] + gathered + list(params),
            "grads": [p.grad for p in self.params + pieces if p.grad is not None] + list(grads),
            "state": [v for s in self.inner.state for v in s.values() if hasattr(v, "nbytes")],
        }
        if isinstance(self.opt, DistributedOptimizer):
            arrays["grads"] += [bucket.flat for bucket in self.opt.buckets]
        arrays = {kind: [_owner(a) for a in held] for kind, held in arrays.items()}
        total = distinct_bytes([a for kind in arrays.values() for a in kind])
        if total > self.peak[0]:
            self.peak = total, {kind: distinct_bytes(a) for kind, a in arrays.items()}


def _owner(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class Layout:
    """One rank's model and data-parallel optimizer: plain sync (``stage`` 0) or ZeRO."""

    def __init__(self, census, comm, args, rule, stage):
        self.census, self.comm, self.stage = census, comm, stage
        self.model, shape = build(args.model, args.variant)
        self.params = list(self.model.parameters())
        self.inner = RULES[rule][0](self.params)
        for p in self.params:  # before ZeRO's own hooks: the whole gradient, before reduced
            p.register_post_accumulate_grad_hook(lambda p: census.sample())
        if stage:
            self.opt = ZeroOptimizer(self.inner, comm, stage=stage, model=self.model)
        else:
            self.opt = DistributedOptimizer(self.inner, comm)
        rng = np.random.default_rng(comm.rank)
        self.x = rng.standard_normal((args.batch_size, *shape)).astype(np.float32)
        self.y = rng.integers(0, 10, args.batch_size)

    def step(self):
        """One step after a barrier: (its seconds, the seconds of it in collectives)."""
        self.comm.barrier()
        start, before = time.perf_counter(), self.census.comm_seconds
        self.opt.zero_grad()
        F.cross_entropy(self.model(md.Tensor(self.x)), self.y).backward()
        self.opt.step()
        self.census.sample()
        return time.perf_counter() - start, self.census.comm_seconds - before

    def peak(self):
        """The bytes this rank holds at their peak in one step (the buffer pool off) after a
        first one: (total, {kind: bytes}), and the bytes a step moves."""
        self.step()
        moved = sum(self.opt.stats.get(key, 0) for key in ("bytes_gathered", "bytes_reduced"))
        self.census.watch(self.params, self.inner, self.opt)
        self.census.sampling, HOST_POOL.limit = True, 0
        self.step()
        self.census.sampling, HOST_POOL.limit = False, default_limit()
        return self.census.peak, moved

    def forward(self):
        """A forward alone (no graph): what stage 3 runs once more, for its recomputed layers."""
        with md.no_grad():
            start = time.perf_counter()
            self.model(md.Tensor(self.x))
            return time.perf_counter() - start


def alternate(sync, zero, rounds):
    """Steps of ``sync`` and ``zero`` taken in turn, ``rounds`` of each after a first: their
    median seconds, the median of ``zero``'s over ``sync``'s round by round, and the median
    seconds of ``zero``'s step in collectives (load that comes and goes hits both alike)."""
    sync.step(), zero.step()
    times = [(sync.step()[0], *zero.step()) for _ in range(rounds)]
    plain, sharded, spent = (statistics.median(column) for column in zip(*times))
    return plain, sharded, statistics.median(z / s for s, z, _ in times), spent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("alexnet", "lenet5"), default="alexnet")
    parser.add_argument("--variant", choices=("original", "torchvision"), default="torchvision")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rules", default="momentum,adam")
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    census = Census(comm)
    for rule in args.rules.split(","):
        sync = Layout(census, comm, args, rule, 0)
        for stage in (0, 1, 2, 3):
            layout = sync if stage == 0 else Layout(census, comm, args, rule, stage)
            peak, moved = layout.peak()
            if stage == 0:
                forward = comm.allgather_object(sync.forward())
            timing = alternate(sync, layout, args.rounds) if stage else None
            mine = comm.allgather_object((peak, moved, timing))
            if comm.rank == 0:
                report(args, rule, stage, mine, forward, sum(p.data.nbytes for p in sync.params))
            del layout


def report(args, rule, stage, everyone, forward, p):
    """Rank 0's line: the largest peak over the ranks, with its parts, against one process
    and the formula; for ZeRO the step against sync's (the slower rank's medians)."""
    k, n = RULES[rule][1], len(everyone)
    one = p + p + k * p
    formula = {0: one, 1: 2 * p + k * p / n, 2: p + (1 + k) * p / n, 3: one / n}[stage]
    (total, kinds), moved, _ = max(everyone, key=lambda mine: mine[0][0])
    parts = ", ".join(f"{kind} {kinds[kind] / 2**20:.1f}" for kind in kinds)
    line = (
        f"{args.model} {args.variant} {rule} {f'zero-{stage}' if stage else 'sync'}: peak per "
        f"rank {total / 2**20:.1f} MiB ({parts}) = {total / one:.3f}x one process (formula "
        f"{formula / one:.3f}x)"
    )
    if stage:
        plain, sharded, ratio, spent = (max(m[2][i] for m in everyone) for i in range(4))
        line += (
            f"; step {1e3 * sharded:.0f} ms against sync's {1e3 * plain:.0f} ms: {ratio:.2f}x "
            f"(collectives {1e3 * spent:.0f} ms, moving {moved / p:.1f} P a step)"
        )
    else:
        line += f"; a forward alone {1e3 * max(forward):.0f} ms"
    print(line, flush=True)


if __name__ == "__main__":
    main()
