"""Keuper & Pfreundt's "degenerated GEMM" (2016, Fig. 9) on this machine, with the roofline's view.

Times the fully connected layer's product b x 4096 * 4096 x 9192 (their
shape) and AlexNet's fc6, b x 9216 * 9216 x 4096, for b = 256 ... 1, with
NumPy and PyTorch side by side in one process. Prints GFLOP/s and the
speedup T(256)/T(b) against the ideal 256/b, and the speedup the roofline
predicts from this machine's measured peak and bandwidth: the product
reads the whole weight matrix whatever b is, so below b ~ ridge/2 it is
memory-bound and stops getting faster.

Run: ``python benchmarks/bench_predict_gemm.py [--threads 1]``.
"""

import argparse

import numpy as np

from minidl.backend import limit_threads, tune_malloc
from minidl.perf.compute_model import roofline_time
from minidl.perf.machine import measure_machine, median_seconds

tune_malloc()  # as the minidl command does: step temporaries stay in the process

SHAPES = {"their 4096x9192": (4096, 9192), "fc6 9216x4096": (9216, 4096)}
BATCHES = (256, 128, 64, 32, 16, 8, 4, 2, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    threads = limit_threads(args.threads)  # noqa: F841
    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    machine = measure_machine()
    print(
        f"roofline: {machine.peak_flops / 1e9:.0f} GFLOP/s, {machine.bandwidth / 1e9:.1f} GB/s, "
        f"ridge {machine.ridge:.1f} FLOP/byte"
    )
    rng = np.random.default_rng(0)
    for label, (k, n) in SHAPES.items():
        w = rng.standard_normal((k, n)).astype(np.float32)
        tw = torch.from_numpy(w) if torch else None
        print(f"\n{label}: b x {k} * {k} x {n}")
        print(
            f"{'b':>4} {'numpy ms':>9} {'GFLOP/s':>8} {'speedup':>8} {'ideal':>6} {'roofline':>9}"
            + (f" {'torch ms':>9} {'numpy/torch':>12}" if torch else "")
        )
        base = None
        for b in BATCHES:
            x = rng.standard_normal((b, k)).astype(np.float32)
            t = median_seconds(lambda: x @ w, args.repeats)
            roof = roofline_time(machine, 2 * b * k * n, 4 * (k * n + b * k + b * n))
            base = base or (t, roof)
            line = (
                f"{b:>4} {t * 1e3:9.2f} {2 * b * k * n / t / 1e9:8.1f} {base[0] / t:8.1f} "
                f"{BATCHES[0] / b:6.0f} {base[1] / roof:9.1f}"
            )
            if torch:
                tx = torch.from_numpy(x)
                tt = median_seconds(lambda: tx @ tw, args.repeats)
                line += f" {tt * 1e3:9.2f} {t / tt:12.2f}"
            print(line)


if __name__ == "__main__":
    main()
