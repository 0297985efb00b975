"""The model zoo: LeNet-5, AlexNet (three variants), ResNet-18/50/20 and an MLP."""

from .activations import ACTIVATIONS
from .alexnet import VARIANTS as ALEXNET_VARIANTS
from .alexnet import alexnet
from .lenet import lenet5
from .mlp import mlp
from .resnet import resnet18, resnet20, resnet50

# CLI names -> builders taking (num_classes, in_channels, conv_algo, activation)
MODELS = {
    "mlp": lambda classes, channels, algo, act: mlp(classes, channels * 28 * 28, activation=act),
    "lenet5": lambda classes, channels, algo, act: lenet5(classes, channels, act, algo),
    "alexnet-small": lambda classes, channels, algo, act: alexnet(
        classes, "small", channels, algo, activation=act
    ),
    "resnet20": lambda classes, channels, algo, act: resnet20(classes, channels, algo, act),
    "resnet18": lambda classes, channels, algo, act: resnet18(classes, channels, algo, act),
    "resnet50": lambda classes, channels, algo, act: resnet50(classes, channels, algo, act),
    "alexnet": lambda classes, channels, algo, act, **options: alexnet(
        classes, in_channels=channels, conv_algo=algo, activation=act, **options
    ),
}
RESIDUAL_MODELS = ("resnet20", "resnet18", "resnet50")  # their blocks nest layers


def build(
    name: str,
    num_classes: int = 10,
    in_channels: int = 1,
    conv_algo: str = "auto",
    activation: str = "relu",
    **options,
):
    """A model by its CLI name; an unknown name lists the choices. ``options`` (``variant``,
    ``image_size``, ``dropout``) are AlexNet's."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    if options and name != "alexnet":
        raise ValueError(f"model {name!r} takes no options {sorted(options)} (alexnet does)")
    return MODELS[name](num_classes, in_channels, conv_algo, activation, **options)


__all__ = [
    "lenet5",
    "alexnet",
    "resnet18",
    "resnet20",
    "resnet50",
    "mlp",
    "ACTIVATIONS",
    "ALEXNET_VARIANTS",
    "MODELS",
    "build",
]
