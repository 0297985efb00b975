"""Argument types and options shared by the sub-commands."""

import argparse
import math

from ..perf.zoo import MODEL_NAMES, parse_shape

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


def option_adder(parser, helps):
    """``parser.add_argument`` that takes an option's help, unless given, from ``helps`` (by its
    first name): long help texts live in a table, so that every option takes one line."""

    def add(*names, **kwargs):
        kwargs.setdefault("help", helps.get(names[0]))
        return parser.add_argument(*names, **kwargs)

    return add


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
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text if keep_text else value

    return check


def add_model_arguments(p):
    """--model, --input and --threads, shared by the perf commands."""
    p.add_argument("--model", default="lenet5", choices=MODEL_NAMES)
    shape = "input shape without the batch (default: the model's own)"
    p.add_argument("--input", metavar="CxHxW", type=argument_type(parse_shape), help=shape)
    threads = "BLAS threads (default: all cores; 1 is steadier on a busy machine)"
    p.add_argument("--threads", type=positive_int, help=threads)
