"""Are the default threads as fast as the best setting? ``minidl train``'s epoch time with the
default thread choice against ``--threads 1`` and ``--threads 2``, for LeNet-5 and
AlexNet-small on Fashion-MNIST, in one process and on 2 ranks (``mpiexec``; 2 threads
per rank there oversubscribe the cores, measured once: 35.6 s against 1.5 s for an epoch,
so left out), on a quiet machine and beside a competing process (a busy loop on one core).

    python benchmarks/bench_threads.py [--rounds 5] [--subset 18000] [--baseline DIR]

``--baseline DIR`` also times the default of the minidl tree in DIR (a worktree of an
earlier commit: ``git worktree add /tmp/old REV``), imported in place of the installed one.
Settings alternate round by round; each figure is the median of the rounds' epoch times
(``metrics.jsonl``'s), and the ratio is the default's over the best setting's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from minidl_app.launch import mpi_unavailable_reason, python_command

SETTINGS = {"default": [], "1 thread": ["--threads", "1"], "2 threads": ["--threads", "2"]}
# `python -c` with this runs `minidl ARGS` from the tree in argv[1], not the installed minidl
FROM_TREE = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_module('minidl', run_name='__main__')"
)


def epoch_seconds(model, flags, ranks, subset, tree=None):
    """The epoch time ``minidl train`` prints for one epoch of ``model`` with ``flags``."""
    with tempfile.TemporaryDirectory() as out:
        args = ["train", "--model", model, "--subset", str(subset), "--test-subset", "100"]
        args += ["--epochs", "1", "--no-progress", "--out", out, *flags]
        if ranks > 1:
            args += ["--dist", "sync"]
        args = ["-c", FROM_TREE, tree, *args] if tree else ["-m", "minidl", *args]
        if ranks > 1:
            command, env = python_command(ranks, args)
        else:
            command, env = [sys.executable, *args], {}
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
        if result.returncode:
            raise RuntimeError(f"{model} {flags} on {ranks}: {result.stdout}{result.stderr}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
    return next(r["seconds"] for r in records if r.get("kind") == "epoch")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--subset", type=int, default=18000)
    parser.add_argument("--baseline", metavar="DIR", help="also time this minidl tree's default")
    args = parser.parse_args()
    ranks_list = [1] + ([2] if mpi_unavailable_reason() is None else [])
    for load in ("quiet", "competing"):
        busy = None
        if load == "competing":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for model in ("lenet5", "alexnet-small"):
                for ranks in ranks_list:
                    settings = SETTINGS if ranks == 1 else dict(list(SETTINGS.items())[:2])
                    settings = {name: (flags, None) for name, flags in settings.items()}
                    if args.baseline:
                        settings["baseline default"] = ([], args.baseline)
                    times = {name: [] for name in settings}
                    for _ in range(args.rounds):
                        for name, (flags, tree) in settings.items():
                            subset = args.subset if model == "lenet5" else args.subset // 6
                            times[name].append(epoch_seconds(model, flags, ranks, subset, tree))
                    medians = {name: statistics.median(t) for name, t in times.items()}
                    best = min(s for name, s in medians.items() if name != "baseline default")
                    cells = ", ".join(f"{name} {s:.2f} s" for name, s in medians.items())
                    print(
                        f"{load:9} {model:13} {ranks} rank(s): {cells}; default / best "
                        f"{medians['default'] / best:.3f}x",
                        flush=True,
                    )
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()


if __name__ == "__main__":
    main()
