"""What does recomputation save and cost? Activation bytes, peak memory and step time of
LeNet-5 and AlexNet-small, plain and with N = round(sqrt(L)) recomputed segments.

    python benchmarks/bench_recompute.py [--batch 64] [--rounds 9] [--threads 1]

Per model, both ways: the bytes the autograd graph holds between forward and backward
(``perf.graph_memory.graph_bytes`` of the loss: what Chen et al. 2016 take from O(L) to
O(sqrt(L))); the peak of the memory a whole step (forward, loss, backward, momentum update)
allocates above what it starts with, traced with minidl's buffer pool off, so that every
array counts when it is made; and the median step time over rounds that alternate the two
(pool on, as in training), so machine noise hits both. float32, one fixed batch.
"""

import argparse
import os
import statistics
import time
import tracemalloc

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.backend import limit_threads
from minidl.perf.graph_memory import graph_bytes
from minidl.pool import HOST_POOL


def build(name, recompute):
    md.manual_seed(0)
    model = md.models.build(name)
    return L.Recompute(model, L.sqrt_segments(len(model))) if recompute else model


class Step:
    """One training step of ``model`` on a fixed batch: forward, loss, backward, update."""

    def __init__(self, model, batch):
        rng = np.random.default_rng(0)
        self.model = model
        self.x = md.tensor(rng.standard_normal((batch, 1, 28, 28)))
        self.y = rng.integers(0, 10, batch)
        self.optimizer = optim.Momentum(model.parameters(), lr=1e-3)

    def loss(self):
        return F.cross_entropy(self.model(self.x), self.y)

    def __call__(self):
        start = time.perf_counter()
        self.optimizer.zero_grad()
        self.loss().backward()
        self.optimizer.step()
        return time.perf_counter() - start


def peak_bytes(step):
    """The most bytes one step holds above its start, every array traced (pool off)."""
    limit, HOST_POOL.limit = HOST_POOL.limit, 0
    HOST_POOL.clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        step()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
        HOST_POOL.limit = limit


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    limits = limit_threads(args.threads)  # noqa: F841 (BLAS and minidl threads while it lives)
    print(f"load average {os.getloadavg()[0]:.1f}; batch {args.batch}, {args.rounds} rounds")
    print(
        "| model | layers | segments | held (plain) | held (recomputed) | ratio "
        "| peak (plain) | peak (recomputed) | ratio | step (plain) | step (recomputed) | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("lenet5", "alexnet-small"):
        steps = {r: Step(build(name, r), args.batch) for r in (False, True)}
        held = {r: graph_bytes(step.loss()) for r, step in steps.items()}
        peak = {r: peak_bytes(step) for r, step in steps.items()}
        times = {False: [], True: []}
        for _ in range(2):  # warm-up: the pool's blocks, the first-call costs
            for step in steps.values():
                step()
        for _ in range(args.rounds):
            for r, step in steps.items():
                times[r].append(step())
        t = {r: statistics.median(v) for r, v in times.items()}
        layers = len(steps[False].model)
        mib = lambda n: f"{n / 2**20:.2f} MiB"  # noqa: E731
        print(
            f"| {name} | {layers} | {L.sqrt_segments(layers)} | {mib(held[False])} "
            f"| {mib(held[True])} | {held[True] / held[False]:.3f}x | {mib(peak[False])} "
            f"| {mib(peak[True])} | {peak[True] / peak[False]:.3f}x | {1e3 * t[False]:.1f} ms "
            f"| {1e3 * t[True]:.1f} ms | {t[True] / t[False]:.2f}x |"
        )


if __name__ == "__main__":
    main()
