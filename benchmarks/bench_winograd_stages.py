"""Where Winograd F(4x4,3x3)'s forward spends its time, 3x3 64->64 on 56x56, batch 16 (CPU).

    python benchmarks/bench_winograd_stages.py [--threads 2] [--rounds 9]

Times, in alternating rounds (medians; a pause before PyTorch so that neither pays for the
other's spinning threads), as a library (no ``tune_malloc``):

* the whole forward by blocks (``blocked_correlation``, what minidl runs for few channels)
  and stage by stage (``winograd_correlation`` with blocks off), and PyTorch's conv2d;
* the stages of the stage-by-stage kernel: the input transform (pad, tile gather and the
  Kronecker GEMM, ``transform_input``), the alpha^2 batched GEMMs, the output transform
  (Kronecker GEMM and scatter, ``_output_chunk``).
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl.backend import limit_threads
from minidl.chunks import batch_chunks
from minidl.conv import winograd as wg

M = 4


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pause", type=float, default=0.3)
    args = parser.parse_args()
    limits = limit_threads(args.threads)  # noqa: F841 (BLAS and minidl threads while it lives)
    import torch

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64, 56, 56)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    geom = md.conv.make_geometry(x.shape, w.shape, padding=1)
    n, k, oh, ow = geom.output_shape
    th, tw = wg.tile_counts(oh, ow, M)
    v = wg.transform_input(x, geom, M)
    u_t = wg.transform_weight(w, M).transpose(0, 2, 1)
    z = np.empty((v.shape[0], n * th * tw, k), np.float32)
    y = np.empty((n, M * th, M * tw, k), np.float32)

    def stages_off(fn):
        def run():
            saved, wg.BLOCK_GEMM_SIZE = wg.BLOCK_GEMM_SIZE, 0
            try:
                fn()
            finally:
                wg.BLOCK_GEMM_SIZE = saved

        return run

    def output_transform():
        z4 = z.reshape(z.shape[0], n, th * tw, k)
        for part in batch_chunks(n, wg.tile_elements(M, th * tw, k) * 4, x):
            wg._output_chunk(z4[:, part], (th, tw), M, y[part])

    tx, tw_ = torch.from_numpy(x), torch.from_numpy(w)
    timed = {
        "forward by blocks": lambda: wg.winograd_correlation(x, w, geom, M),
        "forward stage by stage": stages_off(lambda: wg.winograd_correlation(x, w, geom, M)),
        "  input transform (pad, gather, Kronecker GEMM)": lambda: wg.transform_input(x, geom, M),
        "  36 batched GEMMs V U^T": lambda: np.matmul(v.reshape(z.shape[0], -1, 64), u_t, out=z),
        "  output transform (Kronecker GEMM, scatter)": output_transform,
        "PyTorch conv2d": lambda: torch.nn.functional.conv2d(tx, tw_, padding=1),
    }
    times = {label: [] for label in timed}
    with torch.no_grad():
        for fn in timed.values():
            fn()
        for _ in range(args.rounds):
            for label, fn in timed.items():
                time.sleep(args.pause)
                fn()  # warm: the pause cools caches and clocks
                start = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - start)
    torch_ms = 1e3 * statistics.median(times["PyTorch conv2d"])
    print(f"Winograd F(4x4) forward, 16x64x56x56, {args.threads} threads, {args.rounds} rounds")
    for label, values in times.items():
        ms = 1e3 * statistics.median(values)
        print(f"  {ms:7.2f} ms  ({ms / torch_ms:4.2f}x PyTorch)  {label}")


if __name__ == "__main__":
    main()
