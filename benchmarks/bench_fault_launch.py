"""What launching so that minidl names a dead rank costs a healthy run, side by side.

On a 2-node emulated cluster, sync LeNet-5 training with the default launch and with the
launch of docs/cluster.md's "Let minidl name a dead rank" (``scripts/cluster.py``'s
``KEEP_SURVIVORS``: MPICH ``-disable-auto-cleanup`` with the OFI netmod over TCP, Open MPI
``--with-ft ulfm``), alternating, ``--rounds`` each; per run the training seconds of its
epochs (start-up and evaluation left out). The MPI is the one next to this Python. Needs
root (``scripts/cluster.py``)::

    sudo .venv/bin/python benchmarks/bench_fault_launch.py --rounds 5 --subset 30720 --epochs 2
"""

import argparse
import json
import os
import pathlib
import signal
import statistics
import sys
import tempfile

from bench_cluster_training import load_cluster  # the same folder: a script's sys.path[0]

ROOT = pathlib.Path(__file__).resolve().parents[1]


def training_seconds(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return sum(r["seconds"] for r in map(json.loads, f) if r["kind"] == "epoch")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--subset", type=int, default=7680, help="training images per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still take the nodes down
    cluster = load_cluster()
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpi = cluster.mpi_flavor(mpiexec)
    env, flags = cluster.KEEP_SURVIVORS[mpi]
    launches = {"default": ({}, []), " ".join(flags): (env, flags)}
    times = {name: [] for name in launches}
    with cluster.Cluster(2, name=f"fault{os.getpid()}") as c, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for i, (name, (env, flags)) in enumerate(launches.items()):
                out = os.path.join(tmp, f"round{round_}-launch{i}")
                command = [sys.executable, "-m", "minidl", "train", "--model", "lenet5"]
                command += ["--subset", str(args.subset), "--test-subset", "500"]
                command += ["--epochs", str(args.epochs), "--batch-size", "32", "--no-progress"]
                command += ["--dist", "sync", "--out", out]
                env = {"PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", **env}
                code, output, timed_out = c.mpirun(command, 1, mpi, mpiexec, env, 600, flags)
                if code != 0 or timed_out:
                    print(output)
                    return 1
                times[name].append(training_seconds(out))
    base = statistics.median(times["default"])
    print(
        f"{mpi}, 2 nodes x 1 rank, lenet5, {args.epochs} epochs of {args.subset} images, "
        f"{args.rounds} alternating rounds; median training seconds:"
    )
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"  {name:>22}: {median:6.2f} s ({median / base:.2f}x)  runs: "
            + " ".join(f"{v:.2f}" for v in values)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
