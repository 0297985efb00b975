"""One training step of a 784-256-256-10 MLP (batch 128), minidl vs PyTorch CPU, same process.

Also the autograd's per-op overhead: microseconds for one tiny op (a + b on
4 elements) and for a tiny forward+backward, minidl vs PyTorch.

    python benchmarks/bench_mlp.py [--threads 2] [--rounds 15] [--steps 100] [--pause 0.5]

Rounds alternate between the two frameworks so that machine noise hits both,
with a pause before each so that neither pays for the other's idle threads
still spinning (both thread pools busy-wait for a while after their last
job); the figures are medians over rounds.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.backend import tune_malloc

tune_malloc()  # as the minidl command does: step temporaries stay in the process


def timed(fn, repeats):
    """Seconds per call of ``fn``, averaged over ``repeats`` calls."""
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def minidl_step(x, y):
    md.manual_seed(0)
    model = L.Sequential(
        L.Linear(784, 256), L.ReLU(), L.Linear(256, 256), L.ReLU(), L.Linear(256, 10)
    )
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
    xt = md.tensor(x)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(xt), y).backward()
        opt.step()

    return step


def torch_step(torch, x, y):
    nn = torch.nn
    model = nn.Sequential(
        nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xt, yt = torch.tensor(x), torch.tensor(y)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()

    return step


def tiny_ops(torch):
    a, b = (md.tensor(np.ones(4), requires_grad=True) for _ in range(2))
    ta, tb = (torch.ones(4, requires_grad=True) for _ in range(2))
    return {
        "add": (lambda: a + b, lambda: ta + tb),
        "mul+sum+backward": (lambda: (a * b).sum().backward(), lambda: (ta * tb).sum().backward()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=100, help="timed steps per round")
    parser.add_argument(
        "--pause", type=float, default=0.5, help="seconds of sleep before each round (0: none)"
    )
    args = parser.parse_args()
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 784)).astype(np.float32)
    y = rng.integers(0, 10, 128)
    with threadpool_limits(args.threads, user_api="blas"):
        ours, theirs = minidl_step(x, y), torch_step(torch, x, y)
        for f in (ours, theirs):
            timed(f, 20)  # warm-up: allocations, thread pools
        mine, ref = [], []
        for _ in range(args.rounds):
            time.sleep(args.pause)
            mine.append(timed(ours, args.steps))
            time.sleep(args.pause)
            ref.append(timed(theirs, args.steps))
        m, r = statistics.median(mine), statistics.median(ref)
        print(
            f"MLP 784-256-256-10, batch 128, {args.threads} threads, median of {args.rounds} rounds"
        )
        print(f"  minidl  {m * 1e3:7.3f} ms/step")
        print(f"  PyTorch {r * 1e3:7.3f} ms/step")
        print(f"  ratio minidl/PyTorch = {m / r:.2f}  (target <= 1.2)")
        for name, (f, g) in tiny_ops(torch).items():
            a = statistics.median(timed(f, 2000) for _ in range(7))
            b = statistics.median(timed(g, 2000) for _ in range(7))
            print(
                f"  tiny op {name:18s} minidl {a * 1e6:6.1f} us  PyTorch {b * 1e6:6.1f} us"
                f"  ratio {a / b:.2f}"
            )


if __name__ == "__main__":
    main()
