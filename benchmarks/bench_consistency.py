"""Consistency models with a straggler: the targets re-measured with one command.

    python benchmarks/bench_consistency.py [--epochs 3] [--repeats 3] [--factor 2]
            [--modes bsp,ssp:2,asp,avg:4] [--jitter SECONDS] [--poll-intervals 0,0.0002]

LeNet-5 on Fashion-MNIST, 2 workers, the last one slowed 2x by sleeping
(FACTOR-1) times its compute time after each step. Every configuration is a
real ``mpiexec ... minidl train`` run (parameter-server modes on 3 ranks,
rank 0 serving; avg:H on 2). Prints per mode the medians of epoch time and
images/s, the final test accuracy, staleness, waiting and bytes, and the
ratios the targets name: ssp:2 / bsp and asp / ssp:2 throughput, accuracy
gaps to bsp. Same as ``minidl bench consistency``.
"""

import sys

from minidl_app.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "consistency", *sys.argv[1:]]))
