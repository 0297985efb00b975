"""How well the compute models predict measured training-step times on this machine.

For each model and local batch b: the median time of plain training steps
(forward, cross-entropy, backward, momentum update), the measured compute
model's prediction from per-layer profiles at the *other* batch sizes only
(leave-one-out: b is interpolated or extrapolated, never looked up), its
prediction when b itself is profiled (the per-layer sum), and the roofline
on this machine's measured peak and bandwidth. Ratios predicted/measured.
Profiles and plain steps alternate round by round, and each column is a
median over the rounds, so that load from other processes hits both sides.

Run: ``python benchmarks/bench_predict.py [--threads 1] [--repeats 7]``.
"""

import argparse

import numpy as np

from minidl.backend import limit_threads, tune_malloc
from minidl.perf import count_model
from minidl.perf.compute_model import MeasuredCompute, RooflineCompute
from minidl.perf.machine import measure_machine
from minidl.perf.profile import TrainingStep, profile_model
from minidl.perf.zoo import build_named

tune_malloc()  # as the minidl command does: step temporaries stay in the process

BATCHES = (8, 16, 32, 64, 128)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="lenet5,alexnet-small,mlp")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    threads = limit_threads(args.threads)  # noqa: F841
    machine = measure_machine()
    print(
        f"this machine: {machine.peak_flops / 1e9:.0f} GFLOP/s, "
        f"{machine.bandwidth / 1e9:.1f} GB/s, "
        f"{machine.overhead_s * 1e6:.1f} us per op; BLAS threads: {args.threads or 'all'}"
    )
    print(
        f"{'model':14} {'b':>4} {'measured ms':>12} {'leave-one-out':>14} {'profiled b':>11} "
        f"{'roofline':>9}"
    )
    for name in args.models.split(","):
        model, shape = build_named(name, conv_algo="im2col")
        roof = RooflineCompute(count_model(model, shape, 1), machine)
        plain = {b: TrainingStep(model, shape, b) for b in BATCHES}
        for step in plain.values():
            step.run()
        rows = {b: {"measured": [], "others": [], "own": []} for b in BATCHES}
        for _ in range(args.repeats):
            profiles = {
                b: profile_model(model, shape, b, steps=1, warmup=1, memory=False) for b in BATCHES
            }
            for b in BATCHES:
                rows[b]["measured"].append(plain[b].run())
                others = MeasuredCompute({k: p for k, p in profiles.items() if k != b})
                rows[b]["others"].append(others.step_time(b).total_s)
                rows[b]["own"].append(MeasuredCompute({b: profiles[b]}).step_time(b).total_s)
        for b in BATCHES:
            med = {key: float(np.median(values)) for key, values in rows[b].items()}
            measured = med["measured"]
            print(
                f"{name:14} {b:>4} {measured * 1e3:12.2f} {med['others'] / measured:14.2f} "
                f"{med['own'] / measured:11.2f} {roof.step_time(b).total_s / measured:9.2f}"
            )


if __name__ == "__main__":
    main()
