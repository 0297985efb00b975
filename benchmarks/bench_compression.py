"""Gradient compression in synchronous SGD: accuracy and bytes against float32, one command.

    python benchmarks/bench_compression.py [--epochs 2] [--repeats 1]
            [--schemes none,topk:0.01,fp16,qsgd:4,terngrad,sign]

LeNet-5 on Fashion-MNIST, ``mpiexec -n 2 minidl train --dist sync --compress
SCHEME`` per scheme (error feedback on for top-k and sign). Prints the final
test accuracy, its gap to float32, and the bytes each rank puts on the wire
per step (indices and scales included) as a share of float32's; the target
is top-k 1% within 1 point of float32 on at most 5% of the bytes. Same as
``minidl bench compression``.
"""

import sys

from minidl_app.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "compression", *sys.argv[1:]]))
