"""What do dropout masks keyed by sample cost? AlexNet's two dropout layers, keyed and shared.

    python benchmarks/bench_dropout_keys.py [--batch 128] [--rounds 7]

On an image folder the training loop keys each step's dropout masks by
sample (``minidl.random.set_sample_keys``: one generator per row and draw),
so that data-parallel steps draw what one process would. This alternates,
round by round, the forward dropout of AlexNet's classifier (p = 0.5 on
``(batch, 9216)`` then ``(batch, 4096)`` float32, as in the torchvision
variant) with the shared generator (the reference: one draw for the whole
batch) and with keys, and prints the medians, the ratio and the added
milliseconds per step.
"""

import argparse
import os
import statistics
import time

import numpy as np

import minidl as md
from minidl import functional as F
from minidl.random import set_sample_keys

FEATURES = (256 * 6 * 6, 4096)  # the inputs of fc6 and fc7 (torchvision variant, 224x224)


def step_seconds(inputs, keys):
    """Seconds of the two dropout forwards of one step, keyed by ``keys`` (None: shared)."""
    set_sample_keys(keys)
    try:
        start = time.perf_counter()
        for x in inputs:
            F.dropout(x, 0.5, training=True)
        return time.perf_counter() - start
    finally:
        set_sample_keys(None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    md.manual_seed(0)
    rng = np.random.default_rng(0)
    inputs = [md.tensor(rng.random((args.batch, n), dtype=np.float32)) for n in FEATURES]
    keys = [(0, 0, index) for index in range(args.batch)]
    shared, keyed = [], []
    for _ in range(args.rounds):
        shared.append(step_seconds(inputs, None))
        keyed.append(step_seconds(inputs, keys))
    a, b = statistics.median(shared), statistics.median(keyed)
    print(f"load average {os.getloadavg()[0]:.1f}; batch {args.batch}, {args.rounds} rounds")
    print(f"shared generator: {1e3 * a:.2f} ms per step (median)")
    print(
        f"keyed by sample:  {1e3 * b:.2f} ms per step (median), {b / a:.2f}x, "
        f"+{1e3 * (b - a):.2f} ms"
    )


if __name__ == "__main__":
    main()
