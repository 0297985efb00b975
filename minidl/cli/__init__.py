"""The ``minidl`` command line: one sub-command per job, each in its own module.

Every entry below names the module that defines ``add_<name>_arguments(parser)``
and ``run_<name>(args)``. Modules are
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

COMMANDS = {  # name: (module, help)
    "train": ("minidl.cli.train", "train a model (add --dist under mpiexec)"),
    "eval": ("minidl.cli.train", "accuracy and confusion matrix of a checkpoint"),
    "data": ("minidl.cli.data", "get and locate datasets"),
    "summary": (
        "minidl.cli.summary",
        "per-layer shapes, parameters, FLOPs, memory, work and depth",
    ),
    "profile": (
        "minidl.cli.profile",
        "measured per-layer forward/backward time and memory of a training step",
    ),
    "predict": (
        "minidl.cli.predict",
        "time per iteration, speedup and efficiency of data-parallel training on n nodes",
    ),
    "report": ("minidl.cli.report", "tables and plots of distributed training runs"),
    "exercise": (
        "minidl.cli.exercise",
        "course exercises: list, check (expected vs got, a hint), write a student tree",
    ),
}
BENCHMARKS = {  # name: (module, help), as COMMANDS
    "conv": ("minidl.cli.bench_conv", "convolution algorithms side by side"),
    "allreduce": ("minidl.cli.bench_allreduce", "allreduce algorithms: measured vs the cost model"),
    "consistency": (
        "minidl.cli.bench_consistency",
        "bsp, ssp, asp, avg with a straggler: time, accuracy, staleness, bytes",
    ),
    "compression": (
        "minidl.cli.bench_consistency",
        "sync SGD with compressed gradients: accuracy and bytes vs float32",
    ),
}


class Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, as every other error of the command."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def _add_verbose(p):
    p.add_argument("--verbose", action="store_true", help="show the full traceback of an error")
    return p


def _add_commands(subparsers, table, wanted):
    """A sub-command per entry of ``table``; only ``wanted``'s module is imported (its options)."""
    for name, (module, text) in table.items():
        if name != wanted:
            subparsers.add_parser(name, help=text, add_help=False)
            continue
        sub = _add_verbose(subparsers.add_parser(name, help=text, description=text))
        getattr(importlib.import_module(module), f"add_{name}_arguments")(sub)
        sub.set_defaults(_run=(module, name))


def build_parser(argv):
    """The parser; only the sub-command named in ``argv`` imports its module."""
    text = "minidl: train, measure and model deep networks on NumPy/CuPy and MPI"
    parser = _add_verbose(Parser(prog="minidl", description=text))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv else None
    _add_commands(sub, COMMANDS, wanted)
    text = "side-by-side benchmarks"
    bench = sub.add_parser("bench", help=text, description=text)
    bench = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    _add_commands(bench, BENCHMARKS, argv[1] if wanted == "bench" and len(argv) > 1 else None)
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
    module, name = args._run
    args.argv = argv[1:]  # the sub-command's own arguments, for commands that relaunch themselves
    try:
        return getattr(importlib.import_module(module), f"run_{name}")(args) or 0
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
