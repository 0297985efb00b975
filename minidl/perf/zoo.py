"""Models the perf commands know by name, each with the input shape it was designed for.

The training zoo (``models.MODELS``: 28x28 grey images, 10 classes) plus
the ImageNet-sized AlexNets the performance papers talk about:
``alexnet-original`` (Krizhevsky 2012, 3x227x227, 1000 classes),
``alexnet-torchvision`` (3x224x224) and ``alexnet``, the torchvision form.
"""
import argparse

from .. import models

IMAGENET_ALEXNETS = {
    "alexnet": ("torchvision", (3, 224, 224)),
    "alexnet-original": ("original", (3, 227, 227)),
    "alexnet-torchvision": ("torchvision", (3, 224, 224)),
}
TRAINING_INPUT = (1, 28, 28)

MODEL_NAMES = tuple(models.MODELS) + tuple(IMAGENET_ALEXNETS)


def parse_shape(text):
    """``"3x227x227"`` -> (3, 227, 227); errors say what a valid shape looks like."""
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ValueError(f"input shape {text!r} is not of the form CxHxW with positive sizes, "
                         "e.g. 3x227x227")
    return shape


def positive_int(text):
    """An argparse type: a positive integer, or a usage error that says so."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _shape_argument(text):
    try:
        return parse_shape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_model_arguments(p, default="lenet5"):
    """--model, --input and --threads, shared by the perf commands."""
    p.add_argument("--model", default=default, choices=MODEL_NAMES)
    p.add_argument("--input", default=None, metavar="CxHxW", type=_shape_argument,
                   help="input shape without the batch (default: the model's own)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="BLAS threads (default: all cores; 1 is steadier on a busy machine)")


def limit_threads(n):
    """Cap the BLAS thread pools while the returned object lives (None: no cap)."""
    if n is None:
        return None
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=n)


def build_named(name, input_shape=None, conv_algo="auto"):
    """(model, input shape) for a name in ``MODEL_NAMES``; ``input_shape`` overrides the default."""
    if name in IMAGENET_ALEXNETS:
        variant, default = IMAGENET_ALEXNETS[name]
        shape = tuple(input_shape or default)
        model = models.alexnet(num_classes=1000, variant=variant, in_channels=shape[0],
                               conv_algo=conv_algo)
        return model, shape
    if name not in models.MODELS:
        raise ValueError(f"unknown model {name!r}: choose one of {', '.join(MODEL_NAMES)}")
    shape = tuple(input_shape or TRAINING_INPUT)
    return models.build(name, num_classes=10, in_channels=shape[0], conv_algo=conv_algo), shape
