"""The convolution targets, minidl and PyTorch side by side in one process (CPU, float32).

    python benchmarks/bench_conv.py [--runs 3] [--repeats 5] [--batch-size 16] [--threads 2]
        [--layers 3x3.c64.56px alexnet.conv1 ...] [--tune-malloc]

Prints, for every layer of ``minidl bench conv``, the table of all
algorithms, then the four target ratios (median over ``--runs`` whole runs,
each with a freshly tuned ``auto``):

1. Winograd F(4x4,3x3) forward / PyTorch forward, 3x3 64->64 @56, batch 16 (target <= 0.8)
2. auto forward+backward / PyTorch forward+backward, LeNet and AlexNet layers (<= 1.0)
3. im2col forward GFLOP/s / NumPy GEMM GFLOP/s, AlexNet conv3..conv5 (>= 0.5)
4. auto / fastest algorithm, forward and forward+backward, every layer (<= 1.1)

NumPy's GEMM rate is measured in the same run (2048^3 float32 matmul, median).
minidl runs as a library by default (its buffer pool, nothing process-wide);
``--tune-malloc`` first applies ``md.backend.tune_malloc()``, as the ``minidl``
command does, to compare the two.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl.backend import limit_threads, tune_malloc
from minidl_app.conv_bench import LAYERS, bench_layer, format_rows


def numpy_gemm_gflops(n=2048, repeats=9):
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    out = np.empty_like(a)
    np.matmul(a, a, out=out)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, a, out=out)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def one_run(batch_size, repeats, verbose, max_busy=None, layers=None):
    """{layer: {algo: Row}} for every layer (or those named), and NumPy's GEMM rate."""
    md.conv.clear_cache()
    results = {}
    gemm = numpy_gemm_gflops()
    for name, *_ in LAYERS:
        if layers and name not in layers:
            continue
        rows = bench_layer(name, batch_size, repeats=repeats, max_busy=max_busy)
        if verbose:
            print(format_rows(rows), flush=True)
        results[name] = {r.algo: r for r in rows}
    return results, gemm


def ratios(results, gemm):
    """The target ratios of one run: {label: value}."""
    out = {}
    c64 = results.get("3x3.c64.56px")
    if c64:
        out["1. winograd_f4x4_3x3 fwd / torch fwd, 3x3.c64.56px (<= 0.8; issue 20: 1.2)"] = (
            c64["winograd_f4x4_3x3"].forward_ms / c64["torch"].forward_ms
        )
    for name, rows in results.items():
        if name.startswith(("lenet", "alexnet")):
            out[f"2. auto fwd+bwd / torch fwd+bwd, {name} (<= 1.0)"] = (
                rows["auto"].train_ms / rows["torch"].train_ms
            )
    for name in ("alexnet.conv3", "alexnet.conv4", "alexnet.conv5"):
        if name not in results:
            continue
        out[f"3. im2col fwd GFLOP/s / numpy GEMM GFLOP/s, {name} (>= 0.5)"] = (
            results[name]["im2col"].gflops / gemm
        )
    for name, rows in results.items():
        timed = [r for a, r in rows.items() if a not in ("auto", "torch") and r.forward_ms]
        for kind in ("forward_ms", "train_ms"):
            best = min(getattr(r, kind) for r in timed)
            label = "fwd" if kind == "forward_ms" else "fwd+bwd"
            out[f"4. auto / fastest algorithm, {label}, {name} (<= 1.1)"] = (
                getattr(rows["auto"], kind) / best
            )
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--quiet", action="store_true", help="only the ratios")
    parser.add_argument(
        "--max-busy",
        type=float,
        default=None,
        help="time only when other processes use less than this CPU fraction",
    )
    parser.add_argument("--threads", type=int, default=2, help="BLAS, PyTorch and minidl threads")
    parser.add_argument("--layers", nargs="+", choices=[layer[0] for layer in LAYERS])
    parser.add_argument(
        "--tune-malloc",
        action="store_true",
        help="apply md.backend.tune_malloc() first, as the minidl command does",
    )
    args = parser.parse_args()
    if args.tune_malloc:
        tune_malloc()
    limits = limit_threads(args.threads)  # noqa: F841 (the limits last while it lives)
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    mode = "after tune_malloc()" if args.tune_malloc else "as a library"
    print(f"minidl {mode}, {args.threads} threads", flush=True)
    collected, gemm_rates = {}, []
    for run in range(args.runs):
        print(f"--- run {run + 1} of {args.runs}", flush=True)
        results = one_run(args.batch_size, args.repeats, not args.quiet, args.max_busy, args.layers)
        gemm_rates.append(results[1])
        for label, value in ratios(*results).items():
            collected.setdefault(label, []).append(value)
    print(f"\nTarget ratios, median over {args.runs} runs (all runs in brackets):")
    for label, values in collected.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {statistics.median(values):6.2f}  {label}   [{runs}]")
    print("NumPy GEMM GFLOP/s per run: " + ", ".join(f"{g:.0f}" for g in gemm_rates))


if __name__ == "__main__":
    main()
