"""Roofline parameters of a compute device: peak FLOP/s, memory bandwidth, per-operation overhead.

``measure_machine()`` measures them here in about a second: a large float32
matrix product for the peak, a large ``np.add`` for the bandwidth, and a
tiny differentiable op (forward and backward) for the fixed cost of one
operation. ``PRESETS`` hold datasheet numbers of the devices in Keuper &
Pfreundt (2016); with ``RooflineCompute.calibrated`` only their ratio (the
ridge point, FLOP per byte) shapes a prediction, the given time per
iteration sets its scale.
"""

import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Machine:
    """A device for the roofline model: time = max(FLOPs / peak, bytes / bandwidth) + overhead."""

    name: str
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s to memory
    overhead_s: float  # fixed cost of one operation (launch, Python dispatch)

    @property
    def ridge(self):
        """FLOP per byte above which an operation is compute-bound."""
        return self.peak_flops / self.bandwidth


PRESETS = {
    # one GK210 of a Tesla K80 (NVIDIA datasheet: 8.73 TFLOP/s fp32 boost,
    # 480 GB/s per board of two)
    "k80": Machine("k80", 4.37e12, 240e9, 10e-6),
    # two Xeon E5-2680 v3: 24 cores x 2.5 GHz x 32 fp32 FLOP/cycle (2 AVX2 FMA),
    # 4 DDR4-2133 channels each
    "haswell-2x12": Machine("haswell-2x12", 1.92e12, 136e9, 5e-6),
}


def median_seconds(fn, repeats):
    """Median wall time of ``repeats`` calls of ``fn()`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure_machine(repeats=5, gemm_size=1024, stream_bytes=1 << 26):
    """A ``Machine`` measured on this host with NumPy (medians of ``repeats``)."""
    from .. import functional as F
    from ..autograd import Tensor

    rng = np.random.default_rng(0)
    a = rng.standard_normal((gemm_size, gemm_size)).astype(np.float32)
    b = rng.standard_normal((gemm_size, gemm_size)).astype(np.float32)
    peak = 2 * gemm_size**3 / median_seconds(lambda: a @ b, repeats)
    n = stream_bytes // 4
    x, y, z = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    bandwidth = 3 * stream_bytes / median_seconds(lambda: np.add(x, y, out=z), repeats)
    tiny = Tensor(np.ones((1, 1), np.float32), requires_grad=True)
    overhead = median_seconds(lambda: F.relu(tiny).sum().backward(), 5 * repeats) / 4
    return Machine("here", peak, bandwidth, overhead)


def machine_named(name):
    """A preset, or ``"here"`` to measure this host."""
    if name == "here":
        return measure_machine()
    if name not in PRESETS:
        raise ValueError(f"unknown machine {name!r}: choose 'here' or one of {', '.join(PRESETS)}")
    return PRESETS[name]
