"""Training across emulated nodes with capped links: sync, sync with top-k 1% and QSGD
compression, ssp:2 and asp, side by side, each to a fixed test accuracy; per run the training
seconds and epochs to reach it, and the staleness, waiting and bytes of its records.

Needs root (``scripts/cluster.py``). Every run has one worker per node, 32 images each per
step (``--nodes`` workers); ssp and asp add their server on one more node. An epoch is
``--subset`` images, evaluated on the first ``--test-subset`` test images; with
``--target-acc`` a run stops at the first epoch whose test accuracy reaches it (at most
``--epochs``), and its time to the target is the training seconds of its epochs so far
(evaluation and start-up left out)::

    sudo .venv/bin/python benchmarks/bench_cluster_training.py --nodes 2 --model lenet5 \\
        --rates 1gbit,10gbit,none --subset 2560 --target-acc 0.7 --epochs 10
"""

import argparse
import importlib.util
import os
import pathlib
import signal
import sys
import tempfile
import time

from minidl_app.metrics import read_metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNS = {  # name: (--dist, --compress, uses a server)
    "sync": ("sync", "none", False),
    "sync topk:0.01": ("sync", "topk:0.01", False),
    "sync qsgd:4": ("sync", "qsgd:4", False),
    "ssp:2": ("ssp:2", "none", True),
    "asp": ("asp", "none", True),
}
OPTIMIZERS = {  # model: its training options (AlexNet-small stayed at chance for 3 epochs
    # of 2,560 images with minidl train's default momentum SGD at lr 0.01; Adam is its example's)
    "lenet5": [],
    "alexnet-small": ["--optimizer", "adam", "--lr", "0.001"],
}


def load_cluster():
    spec = importlib.util.spec_from_file_location("cluster", ROOT / "scripts" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(out):
    """The run's whole records so far (a line being written is left for later)."""
    try:
        return read_metrics(os.path.join(out, "metrics.jsonl"), drop_torn_tail=True)
    except FileNotFoundError:
        return []


def reached(out, target):
    """The first epoch whose test accuracy reaches ``target`` (None: not yet)."""
    for r in records(out):
        if r["kind"] == "epoch" and r["test_acc"] >= target:
            return r["epoch"]
    return None


def summary(out, target, float32_bytes, steps_per_epoch):
    """Training seconds and epochs to ``target`` (or all), accuracy, waiting, bytes, staleness.

    Bytes: a parameter-server worker's pushes (its ``dist`` records); a sync worker's input to
    each step's allreduce or allgather: its float32 gradient, or its compressed payload.
    """
    done = reached(out, target) if target else None
    kept = [r for r in records(out) if done is None or r["epoch"] <= done]
    epochs = [r for r in kept if r["kind"] == "epoch"]
    dist = [r for r in kept if r["kind"] == "dist"]
    compression = [r for r in kept if r["kind"] == "compression"]
    row = {
        "seconds": sum(r["seconds"] for r in epochs),
        "epochs": len(epochs),
        "reached": done is not None,
        "acc": epochs[-1]["test_acc"] if epochs else None,
    }
    if dist:
        workers = dist[0]["workers"]
        row["wait_s"] = sum(sum(d["per_worker"]["wait_s"]) for d in dist) / workers
        row["mib_per_worker"] = sum(d["worker_bytes_sent"] for d in dist) / workers / 2**20
        row["staleness"] = (
            sum(d["staleness"]["mean"] for d in dist) / len(dist),
            max(d["staleness"]["max"] for d in dist),
        )
    else:
        per_step = compression[-1]["payload_bytes_per_step"] if compression else float32_bytes
        row["mib_per_worker"] = per_step * steps_per_epoch * len(epochs) / 2**20
    return row


def format_row(row):
    line = f"{row['seconds']:6.1f} s, {row['epochs']} epochs"
    line += "" if row["reached"] else " (target not reached)"
    line += f", test acc {row['acc']:.3f}" if row["acc"] is not None else ""
    if "wait_s" in row:
        line += f", wait {row['wait_s']:.1f} s/worker"
    line += f", {row['mib_per_worker']:.1f} MiB/worker"
    if "staleness" in row:
        line += f", staleness mean {row['staleness'][0]:.2f} max {row['staleness'][1]}"
    return line


def float32_gradient_bytes(model):
    sys.path.insert(0, str(ROOT))
    from minidl.models import build

    return 4 * sum(p.data.size for p in build(model).parameters())


def run_to_target(c, command, ranks, mpi, mpiexec, env, out, target, limit_s):
    """Run ``command`` on the cluster; stop it at the target (a job past ``limit_s`` fails)."""
    job = c.start(command, ranks, mpi, mpiexec, env)
    deadline = time.monotonic() + limit_s
    while job.poll() is None and time.monotonic() < deadline:
        if target and reached(out, target) is not None:
            break
        time.sleep(0.2)
    stopped = job.poll() is None
    if stopped:  # reached the target, or past the limit: the job and its ranks go
        os.killpg(job.pid, signal.SIGKILL)
    code, output, _ = c.finish(job, 30)
    failed = time.monotonic() >= deadline or (not stopped and code != 0)
    return failed, output


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="workers, one per node")
    parser.add_argument("--model", default="lenet5", choices=sorted(OPTIMIZERS))
    parser.add_argument("--rates", default="1gbit,10gbit,none")
    parser.add_argument("--runs", default=",".join(RUNS), help="which of " + ", ".join(RUNS))
    parser.add_argument("--subset", type=int, default=2560, help="training images per epoch")
    parser.add_argument("--test-subset", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=10, help="at most this many epochs")
    parser.add_argument("--target-acc", type=float, help="stop at this test accuracy")
    parser.add_argument("--limit-s", type=float, default=600, help="fail a run past this")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still take the nodes down
    cluster = load_cluster()
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpi = cluster.mpi_flavor(mpiexec)
    env = {"PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    float32_bytes = float32_gradient_bytes(args.model)
    steps_per_epoch = -(-args.subset // (32 * args.nodes))
    print(
        f"{args.model} ({float32_bytes / 2**20:.2f} MiB of float32 gradient), {args.nodes} "
        f"workers x 32, epochs of {args.subset} images, test on {args.test_subset}, "
        f"target {args.target_acc}, at most {args.epochs} epochs, {mpi}"
    )
    for rate in args.rates.split(","):
        rate = None if rate == "none" else rate
        with (
            cluster.Cluster(args.nodes + 1, rate=rate, name=f"train{os.getpid()}") as c,
            tempfile.TemporaryDirectory() as tmp,
        ):
            for name in args.runs.split(","):
                mode, compress, server = RUNS[name]
                out = os.path.join(tmp, name.replace(" ", "-").replace(":", ""))
                command = [sys.executable, "-m", "minidl", "train", "--model", args.model]
                command += [*OPTIMIZERS[args.model], "--subset", str(args.subset)]
                command += ["--test-subset", str(args.test_subset), "--epochs", str(args.epochs)]
                command += ["--batch-size", "32", "--no-progress", "--dist", mode]
                command += ["--compress", compress, "--out", out]
                ranks = [1 if server else 0] + [1] * args.nodes
                failed, output = run_to_target(
                    c, command, ranks, mpi, mpiexec, env, out, args.target_acc, args.limit_s
                )
                if failed:
                    print(output)
                    return 1
                row = summary(out, args.target_acc, float32_bytes, steps_per_epoch)
                print(f"links {rate or 'unlimited':>9} {name:>15}: {format_row(row)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
