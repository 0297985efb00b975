"""Models the perf commands know by name, each with the input shape it was designed for.

The training zoo (``models.MODELS``: 28x28 grey images, 10 classes) plus
the ImageNet-sized AlexNets the performance papers talk about:
``alexnet-original`` (Krizhevsky 2012, 3x227x227, 1000 classes),
``alexnet-torchvision`` (3x224x224) and ``alexnet``, the torchvision form; ``resnet18``
and ``resnet50`` at torchvision's 3x224x224 and 1000 classes too.
"""

from .. import models

IMAGENET_ALEXNETS = {
    "alexnet": ("torchvision", (3, 224, 224)),
    "alexnet-original": ("original", (3, 227, 227)),
    "alexnet-torchvision": ("torchvision", (3, 224, 224)),
}
IMAGENET_INPUT = (3, 224, 224)
IMAGENET_RESNETS = ("resnet18", "resnet50")
TRAINING_INPUT = (1, 28, 28)

MODEL_NAMES = tuple(dict.fromkeys((*models.MODELS, *IMAGENET_ALEXNETS)))  # "alexnet" is in both


def parse_shape(text):
    """``"3x227x227"`` -> (3, 227, 227); errors say what a valid shape looks like."""
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ValueError(
            f"input shape {text!r} is not of the form CxHxW with positive sizes, e.g. 3x227x227"
        )
    return shape


def build_named(name, input_shape=None, conv_algo="auto"):
    """(model, input shape) for a name in ``MODEL_NAMES``; ``input_shape`` overrides the default."""
    if name in IMAGENET_ALEXNETS:
        variant, default = IMAGENET_ALEXNETS[name]
        shape = tuple(input_shape or default)
        model = models.alexnet(
            num_classes=1000, variant=variant, in_channels=shape[0], conv_algo=conv_algo
        )
        return model, shape
    if name in IMAGENET_RESNETS:
        shape = tuple(input_shape or IMAGENET_INPUT)
        return models.build(name, 1000, shape[0], conv_algo), shape
    if name not in models.MODELS:
        raise ValueError(f"unknown model {name!r}: choose one of {', '.join(MODEL_NAMES)}")
    shape = tuple(input_shape or TRAINING_INPUT)
    return models.build(name, num_classes=10, in_channels=shape[0], conv_algo=conv_algo), shape
