"""Synchronised batch norm on 2 ranks: the step time of a small batch-norm model with and
without ``--sync-bn``'s synchronisation.

    mpiexec -n 2 python benchmarks/bench_sync_bn.py [--model resnet20] [--batch-size 32]
                                                    [--rounds 7] [--steps 3] [--threads 1]

Each rank trains the model (float32, momentum, ``DistributedOptimizer``) on random 3x32x32
images, local batch ``--batch-size``, on ``--threads`` threads per rank (1: two ranks share
two cores without waiting for each other to be scheduled). Rounds of ``--steps`` steps
alternate between per-rank batch norm and the same layers on the world group
(``convert_sync_batchnorm``, which adds one allgather of 2C+1 numbers per layer in forward
and one allreduce of 2C in backward); it prints the median step time of each and the median
of the round-by-round ratios.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import models, optim
from minidl.dist import DistributedOptimizer, convert_sync_batchnorm


def step_time(model, opt, x, y, steps):
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(md.tensor(x)), y).backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    threads = md.backend.limit_threads(args.threads)  # noqa: F841  (kept while it runs)
    comm = md.dist.init()
    model = models.build(args.model, num_classes=10, in_channels=3)
    opt = DistributedOptimizer(optim.Momentum(model.parameters(), lr=0.01), comm)
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal((args.batch_size, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, args.batch_size)
    step_time(model, opt, x, y, 1)  # warm up: buffers, plans
    times = {"per-rank": [], "synchronised": []}
    for _ in range(args.rounds):
        for name, group in (("per-rank", None), ("synchronised", comm)):
            convert_sync_batchnorm(model, group)
            comm.barrier()
            times[name].append(step_time(model, opt, x, y, args.steps))
    if comm.rank == 0:
        plain, synced = times["per-rank"], times["synchronised"]
        ratios = [s / p for s, p in zip(synced, plain)]
        print(f"{args.model}, 2 ranks x batch {args.batch_size}, float32, {args.rounds} rounds:")
        print(f"  per-rank batch norm     {statistics.median(plain) * 1e3:8.1f} ms a step")
        print(f"  synchronised batch norm {statistics.median(synced) * 1e3:8.1f} ms a step")
        print(f"  ratio (median of rounds) {statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
