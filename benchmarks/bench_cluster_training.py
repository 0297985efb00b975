"""LeNet-5 on Fashion-MNIST across emulated nodes with capped links: sync, sync with top-k 1%
and QSGD compression, ssp:2 and asp, side by side; per run the epoch time, the test accuracy,
and the staleness, waiting and bytes of its ``dist`` record.

Needs root (``scripts/cluster.py``). Every run has 2 workers on 2 nodes (32 images each per
step); ssp and asp add their server on a third node::

    sudo .venv/bin/python benchmarks/bench_cluster_training.py --rates 20mbit,none --subset 6400
"""

import argparse
import importlib.util
import json
import os
import pathlib
import signal
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNS = {  # name: (--dist, --compress, ranks per node)
    "sync": ("sync", "none", [0, 1, 1]),
    "sync topk:0.01": ("sync", "topk:0.01", [0, 1, 1]),
    "sync qsgd:4": ("sync", "qsgd:4", [0, 1, 1]),
    "ssp:2": ("ssp:2", "none", [1, 1, 1]),
    "asp": ("asp", "none", [1, 1, 1]),
}


def load_cluster():
    spec = importlib.util.spec_from_file_location("cluster", ROOT / "scripts" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    epochs = [r for r in records if r["kind"] == "epoch"]
    dist = [r for r in records if r["kind"] == "dist"]
    seconds = sum(r["seconds"] for r in epochs)
    line = f"{seconds:6.1f} s, test acc " + " ".join(f"{r['test_acc']:.3f}" for r in epochs)
    if dist:
        d = dist[-1]
        waits = "/".join(f"{w:.1f}" for w in d["per_worker"]["wait_s"])
        line += f", wait {waits} s, pushed {d['worker_bytes_sent'] / 2**20:.1f} MiB"
        if "staleness" in d:
            line += f", staleness mean {d['staleness']['mean']:.2f} max {d['staleness']['max']}"
    return line


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="20mbit,none")
    parser.add_argument("--subset", type=int, default=6400)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still take the nodes down
    cluster = load_cluster()
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpi = cluster.mpi_flavor(mpiexec)
    env = {"PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    print(f"LeNet-5, {args.subset} images x {args.epochs} epochs, 2 workers x 32, {mpi}")
    for rate in args.rates.split(","):
        rate = None if rate == "none" else rate
        with cluster.Cluster(3, rate=rate, name=f"train{os.getpid()}") as c, \
                tempfile.TemporaryDirectory() as tmp:  # fmt: skip
            for name, (mode, compress, ranks) in RUNS.items():
                out = os.path.join(tmp, name.replace(" ", "-").replace(":", ""))
                command = [sys.executable, "-m", "minidl", "train", "--model", "lenet5",
                           "--subset", str(args.subset), "--epochs", str(args.epochs),
                           "--batch-size", "32", "--conv-algo", "im2col", "--no-progress",
                           "--dist", mode, "--compress", compress, "--out", out]  # fmt: skip
                code, output, timed_out = c.mpirun(command, ranks, mpi, mpiexec, env, 1200)
                if code or timed_out:
                    print(output)
                    return 1
                print(f"links {rate or 'unlimited':>9} {name:>15}: {summary(out)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
