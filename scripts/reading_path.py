"""How far a reader walks from ``minidl train`` to a parallelism's first message.

For each path below, runs ``minidl train`` under ``mpiexec`` with a profiler on
rank 0 (``sys.setprofile``, installed before ``minidl`` is imported) and stops
counting at the first call that moves that parallelism's data:

- ``dp``: ``mpiexec -n 2 minidl train --dist sync``, the gradient allreduce (an
  ``allreduce``/``iallreduce`` of the ``Communicator`` made inside backward or
  the optimizer's step);
- ``tp``: ``mpiexec -n 2 minidl train --grid tp=2``, the first tensor-parallel
  allreduce (one made inside a layer's forward);
- ``pp``: ``mpiexec -n 4 minidl train --grid pp=4 --schedule 1f1b
  --micro-batches 4``, the first activation send.

It prints, per path, the orchestration files (every file of ``minidl/`` and
``minidl_app/`` outside the numeric core: command line, training, distribution,
performance, run machinery) in which a function ran before that call, imports aside (a
module's body and what it calls while it is imported); the same with imports; and the
files of the call stack at it (every file of the two). ``--json FILE`` writes them in full::

    python scripts/reading_path.py                # all three paths
    python scripts/reading_path.py --path tp --json tp.json
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [ROOT / name for name in ("minidl", "minidl_app")]  # the library and the command
# the numeric core: what a training step computes with; everything else in minidl/ orchestrates
NUMERIC_CORE = set(
    "autograd.py gradcheck.py recompute.py backend.py pool.py parallel.py random.py atomic.py "
    "chunks.py intmath.py functional conv layers optim models data".split()
)
SMALL_RUN = ["--subset", "64", "--test-subset", "64", "--epochs", "1", "--batch-size", "16"]
COMMON = ["--no-progress", *SMALL_RUN]
PATHS = {  # name: (ranks, minidl train flags, Communicator methods, a function on the stack)
    "dp": (2, ["--dist", "sync"], {"allreduce", "iallreduce"}, {"backward", "step"}),
    "tp": (2, ["--grid", "tp=2"], {"allreduce"}, {"forward"}),
    "pp": (
        4,
        ["--grid", "pp=4", "--schedule", "1f1b", "--micro-batches", "4"],
        {"send", "isend"},
        None,
    ),
}


def orchestration(path):
    """True for a file of the packages outside the numeric core."""
    return Path(path).resolve().relative_to(ROOT).parts[1] not in NUMERIC_CORE


def in_package(path):
    return any(Path(path).resolve().is_relative_to(package) for package in PACKAGES)


def importing(frame):
    """True while ``frame`` runs as part of an import (a module's body, or what it calls)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class PathRecorder:
    """The profile function: every package file that runs code, until the target call."""

    def __init__(self, methods, inside):
        self.methods, self.inside = methods, inside
        self.executed, self.called, self.result = [], [], None
        self._seen, self._called = set(), set()

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename
        if path not in self._seen and in_package(path):
            self._seen.add(path)
            self.executed.append(path)
        if path not in self._called and in_package(path) and not importing(frame):
            self._called.add(path)
            self.called.append(path)
        owner, _, name = code.co_qualname.rpartition(".")
        if owner == "Communicator" and name in self.methods and self._wanted(frame):
            self.result = self._report(frame)
            sys.setprofile(None)

    def _wanted(self, frame):
        if self.inside is None:
            return True
        while frame is not None:
            if frame.f_code.co_name in self.inside:
                return True
            frame = frame.f_back
        return False

    def _report(self, frame):
        stack = []
        while frame is not None:
            if in_package(frame.f_code.co_filename):
                where = Path(frame.f_code.co_filename).resolve().relative_to(ROOT)
                stack.append(f"{where}:{frame.f_lineno} {frame.f_code.co_qualname}")
            frame = frame.f_back
        stack_files = list(dict.fromkeys(line.split(":")[0] for line in reversed(stack)))

        def orchestrating(paths):
            return [str(Path(p).resolve().relative_to(ROOT)) for p in paths if orchestration(p)]

        return {
            "orchestration_files": orchestrating(self.executed),
            "called_files": orchestrating(self.called),
            "stack": stack[::-1],
            "stack_files": stack_files,
        }


def rank_program(name, out, argv):
    """Run ``minidl train argv``; rank 0 profiles up to the target call and writes ``out``."""
    _, _, methods, inside = PATHS[name]
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    recorder = PathRecorder(methods, inside) if rank == 0 else None
    if recorder is not None:
        sys.setprofile(recorder)
    from minidl_app.cli import main

    status = main(["train", *argv])
    if recorder is not None:
        sys.setprofile(None)
        Path(out).write_text(json.dumps(recorder.result, indent=1))
    return status


def measure(name):
    ranks, flags, _, _ = PATHS[name]
    mpiexec = Path(sys.executable).parent / "mpiexec"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "path.json"
        argv = [*flags, *COMMON, "--out", str(Path(tmp) / "run")]
        command = [str(mpiexec), "-n", str(ranks), sys.executable, __file__, "--rank-program"]
        subprocess.run([*command, name, str(out), "--", *argv], check=True, cwd=tmp)
        result = json.loads(out.read_text())
    if result is None:
        raise SystemExit(f"{name}: the run ended before the target call")
    return {"command": f"mpiexec -n {ranks} minidl train {' '.join(flags)}"} | result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=[*PATHS, "all"], default="all")
    parser.add_argument("--json", help="write every path's files and stack here")
    parser.add_argument("--rank-program", nargs=2, metavar=("PATH", "OUT"), help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.rank_program:
        return rank_program(*args.rank_program, [a for a in rest if a != "--"])
    results = {name: measure(name) for name in (PATHS if args.path == "all" else [args.path])}
    for name, result in results.items():
        print(
            f"{name}: {len(result['called_files'])} orchestration files called "
            f"({len(result['orchestration_files'])} with imports), "
            f"{len(result['stack_files'])} files in the stack  ({result['command']})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
