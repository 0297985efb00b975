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
import math
import sys

from minidl import backend
from minidl.dist.comm import init as init_mpi
from minidl.dist.comm import world
from minidl.dist.job import mpiexec_ranks, report_once
from minidl.perf.zoo import MODEL_NAMES, parse_shape
from minidl.train.config import OptionMessage, worded
from minidl_app.launch import mpi_unavailable_reason

USER_ERRORS = (ValueError, OSError, LookupError, ArithmeticError)
ERROR_EXIT = 1

COMMANDS = {  # name: (module, help)
    "train": ("minidl_app.cli.train", "train a model (add --dist under mpiexec)"),
    "eval": ("minidl_app.cli.train", "accuracy and confusion matrix of a checkpoint"),
    "data": ("minidl_app.cli.data", "get and locate datasets"),
    "summary": (
        "minidl_app.cli.summary",
        "per-layer shapes, parameters, FLOPs, memory, work and depth",
    ),
    "profile": (
        "minidl_app.cli.profile",
        "measured per-layer forward/backward time and memory of a training step",
    ),
    "predict": (
        "minidl_app.cli.predict",
        "time per iteration, speedup and efficiency of data-parallel training on n nodes",
    ),
    "report": ("minidl_app.cli.report", "tables and plots of distributed training runs"),
    "verify": (
        "minidl_app.cli.verify",
        "K steps of a layout against one process: the first tensor that differs",
    ),
    "exercise": (
        "minidl_course.command",
        "course exercises: list, check (expected vs got, a hint), write a student tree",
    ),
}
BENCHMARKS = {  # name: (module, help), as COMMANDS
    "conv": ("minidl_app.cli.bench_conv", "convolution algorithms side by side"),
    "allreduce": (
        "minidl_app.cli.bench_allreduce",
        "allreduce algorithms: measured vs the cost model",
    ),
    "consistency": (
        "minidl_app.cli.bench_consistency",
        "bsp, ssp, asp, avg with a straggler: time, accuracy, staleness, bytes",
    ),
    "compression": (
        "minidl_app.cli.bench_consistency",
        "sync SGD with compressed gradients: accuracy and bytes vs float32",
    ),
}


# ---- argument types and options shared by the sub-commands
# options whose flag is not the field's name with dashes
FLAGS = {
    "progress": "--no-progress",
    "overlap": "--no-overlap",
    "verify_data": "--no-verify-data",
    "stragglers": "--straggler",
    "compressor": "--compress",
}


def flag(field):
    """The command-line flag of a configuration field: ``batch_size`` -> ``--batch-size``."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def error_text(exc):
    """The message of ``exc`` as the command line shows it: the options the library marked in
    it (``train.config.option``) named by their flags."""
    return worded(exc.message if isinstance(exc, OptionMessage) else str(exc), flag)


def positive_int(text):
    """An argparse type: a positive integer, or a usage error that says so."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def nonnegative_int(text):
    """An argparse type: an integer >= 0, or a usage error that says so."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return int(text)


def number(minimum=0.0, positive=False):
    """An argparse type for a finite float >= ``minimum`` (> 0 with ``positive``)."""

    def check(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < minimum or (positive and value <= 0):
            bound = "> 0" if positive else f">= {minimum:g}"
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number {bound}")
        return value

    return check


def argument_type(parse, keep_text=False):
    """An argparse type: ``parse(text)`` (or, with ``keep_text``, the text ``parse`` accepts);
    its ValueError becomes a usage error."""

    def check(text):
        try:
            value = parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(error_text(exc)) from None
        return text if keep_text else value

    return check


def add_model_arguments(p):
    """--model, --input and --threads, shared by the perf commands."""
    p.add_argument("--model", default="lenet5", choices=MODEL_NAMES)
    shape = "input shape without the batch (default: the model's own)"
    p.add_argument("--input", metavar="CxHxW", type=argument_type(parse_shape), help=shape)
    threads = "BLAS threads (default: all cores; 1 is steadier on a busy machine)"
    p.add_argument("--threads", type=positive_int, help=threads)


class Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, as every other error of the command."""

    def error(self, message):
        """Under mpiexec every rank parses the same line: it is reported once for the job."""
        line = f"{self.prog}: error: {message} ({self.prog} --help lists the options)"
        if start_mpi_under_mpiexec():
            report_once(line)
            self.exit(2)
        self.exit(2, line + "\n")


def start_mpi_under_mpiexec():
    """Start MPI when mpiexec started this process among others (every rank gets here);
    returns whether it did. An error of any rank can then be reported once for the job."""
    if mpiexec_ranks() > 1 and mpi_unavailable_reason() is None:
        init_mpi()
        return True
    return False


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
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    module, name = args._run
    start_mpi_under_mpiexec()
    args.argv = argv[1:]  # the sub-command's own arguments, for commands that relaunch themselves
    try:
        return getattr(importlib.import_module(module), f"run_{name}")(args) or 0
    except USER_ERRORS as exc:
        if args.verbose:
            raise
        return fail(f"minidl {argv[0]}: error: {error_text(exc)} (--verbose shows where)")
    except KeyboardInterrupt:
        return fail(f"minidl {argv[0]}: interrupted", 130)


def fail(message, code=ERROR_EXIT):
    """Print ``message`` on stderr; under MPI with other ranks, once for the job
    (``job.report_once``), then end the whole job with ``code``."""
    comm = world()
    if comm is None or comm.size == 1:
        print(message, file=sys.stderr, flush=True)
        return code
    report_once(message)
    comm.abort(code)
