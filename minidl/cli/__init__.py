"""The ``minidl`` command line: one sub-command per job, each in its own module.

Every entry below names ``"module:prefix"``; the module defines
``add_<prefix>_arguments(parser)`` and ``run_<prefix>(args)``. Modules are
imported only when their sub-command runs, so ``minidl --help`` is instant and
a missing optional dependency (mpi4py, matplotlib) only affects the commands
that need it.

Errors a user can fix (a missing file, a bad value, a folder that holds a
run, a full disk) print one line, ``minidl COMMAND: error: ...``, and exit
with status 1; ``--verbose`` (anywhere on the line) shows the traceback
instead. Under mpiexec, such an error on any rank aborts the whole job, so no
rank is left waiting for it. Anything else is a bug and shows its traceback.
"""

import argparse
import importlib
import sys

from .. import backend
from ..train.config import name_options
from .common import flag

USER_ERRORS = (ValueError, OSError, LookupError, ArithmeticError)
ERROR_EXIT = 1

COMMANDS = {
    # name: (module, prefix, help)
    "train": ("minidl.cli.train", "train", "train a model (add --dist under mpiexec)"),
    "eval": ("minidl.cli.train", "eval", "accuracy and confusion matrix of a checkpoint"),
    "data": ("minidl.cli.data", "data", "get and locate datasets"),
    "summary": (
        "minidl.cli.summary",
        "summary",
        "per-layer shapes, parameters, FLOPs, memory, work and depth",
    ),
    "profile": (
        "minidl.cli.profile",
        "profile",
        "measured per-layer forward/backward time and memory of a training step",
    ),
    "predict": (
        "minidl.cli.predict",
        "predict",
        "time per iteration, speedup and efficiency of data-parallel training on n nodes",
    ),
    "report": ("minidl.cli.report", "report", "tables and plots of distributed training runs"),
    "exercise": (
        "minidl.cli.exercise",
        "exercise",
        "course exercises: list, check (expected vs got, a hint), write a student tree",
    ),
}

BENCHMARKS = {
    # name: (module, prefix, help)
    "conv": ("minidl.cli.bench_conv", "conv", "convolution algorithms side by side"),
    "allreduce": (
        "minidl.cli.bench_allreduce",
        "allreduce",
        "allreduce algorithms: measured vs the cost model",
    ),
    "consistency": (
        "minidl.cli.bench_consistency",
        "consistency",
        "bsp, ssp, asp, avg with a straggler: time, accuracy, staleness, bytes",
    ),
    "compression": (
        "minidl.cli.bench_consistency",
        "compression",
        "sync SGD with compressed gradients: accuracy and bytes vs float32",
    ),
}


class Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, as every other error of the command."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def _common_options():
    common = Parser(add_help=False)
    common.add_argument(
        "--verbose", action="store_true", help="show the full traceback of an error"
    )
    return common


def _add_commands(subparsers, table):
    for name, (module, prefix, help_text) in table.items():
        sub = subparsers.add_parser(
            name, help=help_text, description=help_text, parents=[_common_options()]
        )
        mod = importlib.import_module(module)
        getattr(mod, f"add_{prefix}_arguments")(sub)
        sub.set_defaults(_run=(module, prefix))


def build_parser(argv):
    """The parser; only the sub-command named in ``argv`` imports its module."""
    parser = Parser(
        prog="minidl",
        description="minidl: train, measure and model deep networks on NumPy/CuPy and MPI",
        parents=[_common_options()],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv else None
    for name, (module, prefix, help_text) in COMMANDS.items():
        if name == wanted:
            _add_commands(sub, {name: (module, prefix, help_text)})
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    bench = sub.add_parser(
        "bench", help="side-by-side benchmarks", description="side-by-side benchmarks"
    )
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    wanted_bench = argv[1] if wanted == "bench" and len(argv) > 1 else None
    for name, entry in BENCHMARKS.items():
        if name == wanted_bench:
            _add_commands(bench_sub, {name: entry})
        else:
            bench_sub.add_parser(name, help=entry[2], add_help=False)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    backend.tune_malloc()  # training and benchmarks: keep step temporaries in the process
    name_options(flag)  # messages of the library name options by their flags
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    module, prefix = args._run
    args.argv = argv[1:]  # the sub-command's own arguments, for commands that relaunch themselves
    try:
        return getattr(importlib.import_module(module), f"run_{prefix}")(args) or 0
    except USER_ERRORS as exc:
        if args.verbose:
            raise
        return fail(f"minidl {argv[0]}: error: {exc} (--verbose shows where)")
    except KeyboardInterrupt:
        return fail(f"minidl {argv[0]}: interrupted", 130)


def fail(message, code=ERROR_EXIT):
    """Print ``message`` on stderr; under MPI with other ranks, end the whole job with ``code``."""
    print(message, file=sys.stderr, flush=True)
    comm = sys.modules["minidl.dist.comm"].world() if "minidl.dist.comm" in sys.modules else None
    if comm is not None and comm.size > 1:
        comm.abort(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
