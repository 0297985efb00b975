"""ZeRO on 2 ranks: bytes of parameters, gradients and optimizer state per rank, and step time.

    mpiexec -n 2 python benchmarks/bench_zero.py [--model alexnet] [--variant torchvision]
                                                 [--batch-size 16] [--steps 5]

For plain sync data parallelism (``DistributedOptimizer``) and ZeRO stages 1, 2 and 3
(``ZeroOptimizer``), with momentum and with Adam, each rank trains ``--steps`` timed steps
of the model on random data (local batch ``--batch-size``, float32), then one more step in
which it counts the bytes it holds, distinct arrays by address (``distinct_bytes``):

- parameters: the model's weights (under stage 3 the gathered copies, while a layer runs)
  and the optimizer's (ZeRO's blocks);
- gradients: the model's ``grad`` arrays, plain sync's bucket buffers, ZeRO's blocks of the
  averaged gradient, and what a reduce-scatter sends and receives;
- optimizer state: the arrays of its ``state``;

sampled as each gradient is accumulated (before ZeRO reduces it), at every collective
(with its buffers) and after the step; it prints the largest total and its parts, next to
one process's P + P + K P (P parameter bytes, K state arrays per parameter: momentum 1,
Adam 2) and to the ZeRO paper's formula (Rajbhandari et al. 2020) for n ranks: stage 1
P + P + K P / n, stage 2 P + P / n + K P / n, stage 3 (P + P + K P) / n. Then the median
step time (steps 2 on) and the seconds of it spent in collectives.
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
        total = distinct_bytes([a for kind in arrays.values() for a in kind])
        if total > self.peak[0]:
            self.peak = total, {kind: distinct_bytes(a) for kind, a in arrays.items()}


def _owner(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def measure(census, comm, args, rule, stage):
    model, shape = build(args.model, args.variant)
    make, _ = RULES[rule]
    params = list(model.parameters())
    inner = make(params)
    for p in params:  # before ZeRO's own hooks: the whole gradient, before it is reduced
        p.register_post_accumulate_grad_hook(lambda p: census.sample())
    if stage:
        opt = ZeroOptimizer(inner, comm, stage=stage, model=model)
    else:
        opt = DistributedOptimizer(inner, comm)
    census.watch(params, inner, opt)
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal((args.batch_size, *shape)).astype(np.float32)
    y = rng.integers(0, 10, args.batch_size)
    seconds, spent = [], []
    for step in range(args.steps + 1):
        census.sampling = step == args.steps  # the last step counts, untimed, unpooled
        HOST_POOL.limit = 0 if census.sampling else default_limit()
        comm.barrier()
        start, before = time.perf_counter(), census.comm_seconds
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y).backward()
        opt.step()
        census.sample()
        seconds.append(time.perf_counter() - start)
        spent.append(census.comm_seconds - before)
    census.sampling, HOST_POOL.limit = False, default_limit()
    timed = slice(1, args.steps) if args.steps > 1 else slice(0, 1)
    moved = sum(opt.stats.get(key, 0) for key in ("bytes_gathered", "bytes_reduced"))
    with md.no_grad():  # a forward alone: what stage 3 adds once more (its layers' share)
        start = time.perf_counter()
        model(md.Tensor(x))
        forward = time.perf_counter() - start
    seconds, spent = statistics.median(seconds[timed]), statistics.median(spent[timed])
    return census.peak, seconds, spent, moved / (args.steps + 1), forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("alexnet", "lenet5"), default="alexnet")
    parser.add_argument("--variant", choices=("original", "torchvision"), default="torchvision")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rules", default="momentum,adam")
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    census = Census(comm)
    p = sum(q.data.nbytes for q in build(args.model, args.variant)[0].parameters())
    for rule in args.rules.split(","):
        k, base = RULES[rule][1], None
        for stage in (0, 1, 2, 3):
            mine = comm.allgather_object(measure(census, comm, args, rule, stage))
            if comm.rank:
                continue
            n, one = comm.size, p + p + k * p
            formula = {0: one, 1: 2 * p + k * p / n, 2: p + (1 + k) * p / n, 3: one / n}[stage]
            (total, kinds), *_ = max(mine, key=lambda m: m[0][0])
            step, spent, moved, forward = (max(m[i] for m in mine) for i in range(1, 5))
            base = step if stage == 0 else base
            parts = ", ".join(f"{kind} {kinds[kind] / 2**20:.1f}" for kind in kinds)
            name = f"zero-{stage}" if stage else f"sync (a forward alone {1e3 * forward:.0f} ms)"
            line = (
                f"{args.model} {args.variant} {rule} {name}: peak per rank "
                f"{total / 2**20:.1f} MiB ({parts}) = {total / one:.3f}x one process (formula "
                f"{formula / one:.3f}x); step {1e3 * step:.0f} ms ({step / base:.2f}x sync)"
            )
            if stage:
                line += f", collectives {1e3 * spent:.0f} ms moving {moved / p:.1f} P a step"
            print(line, flush=True)


if __name__ == "__main__":
    main()
