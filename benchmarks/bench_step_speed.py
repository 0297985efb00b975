"""Per-step speed of sync data parallelism and of a pipeline: this tree beside another checkout.

    python benchmarks/bench_step_speed.py --baseline DIR [--rounds 5] [--subset 6400]

Runs ``mpiexec -n 2 minidl train`` on LeNet-5 and Fashion-MNIST in two layouts,
``--dist sync`` (global batch 128) and ``--grid pp=2 --micro-batches 4`` (batch 64),
once with this tree's ``minidl`` and once with the checkout in ``DIR`` (e.g. a
``git worktree`` of an earlier commit), alternating which goes first each round.
Each run trains two epochs of ``--subset`` images; the second epoch's time (the
training loop's own, the slower rank's) divided by its steps is the per-step time.
Prints the medians and the ratio this tree / baseline per layout (1.00: unchanged).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
LAYOUTS = {
    "sync dp=2": (["--dist", "sync"], 2),  # (flags, replicas sharing a step's samples)
    "pipeline pp=2, M=4": (["--grid", "pp=2", "--micro-batches", "4"], 1),
}


def step_seconds(tree, flags, replicas, subset, batch):
    """Seconds per step of the second epoch of one run with the ``minidl`` of ``tree``."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    with tempfile.TemporaryDirectory() as out:
        run = f"--model lenet5 --epochs 2 --subset {subset} --test-subset 1000 --batch-size {batch}"
        command = [str(mpiexec), "-n", "2", sys.executable, "-m", "minidl", "train", *flags]
        command += [*run.split(), "--no-progress", "--out", os.path.join(out, "run")]
        env = dict(os.environ, PYTHONPATH=str(tree))
        subprocess.run(command, check=True, env=env, capture_output=True)
        lines = Path(out, "run", "metrics.jsonl").read_text().splitlines()
    epochs = [json.loads(line) for line in lines if '"kind": "epoch"' in line]
    steps = math.ceil(subset / (batch * replicas))
    return epochs[-1]["seconds"] / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="a checkout of minidl to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--subset", type=int, default=6400)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    trees = {"this tree": HERE, "baseline": Path(args.baseline).resolve()}
    for name, (flags, replicas) in LAYOUTS.items():
        times = {tree: [] for tree in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for tree in order:
                seconds = step_seconds(trees[tree], flags, replicas, args.subset, args.batch_size)
                times[tree].append(seconds)
        medians = {tree: statistics.median(t) for tree, t in times.items()}
        ratio = medians["this tree"] / medians["baseline"]
        rounds = ", ".join(f"{1e3 * a:.2f}/{1e3 * b:.2f}" for a, b in zip(*times.values()))
        print(
            f"{name}: this tree {1e3 * medians['this tree']:.2f} ms/step, baseline "
            f"{1e3 * medians['baseline']:.2f} ms/step, ratio {ratio:.3f} (rounds: {rounds})",
            flush=True,
        )


if __name__ == "__main__":
    main()
