"""The model zoo: LeNet-5, AlexNet (three variants) and an MLP."""
from .alexnet import VARIANTS as ALEXNET_VARIANTS, alexnet
from .lenet import lenet5
from .mlp import mlp

# CLI names -> builders taking (num_classes, in_channels, conv_algo)
MODELS = {
    "mlp": lambda num_classes, in_channels, conv_algo: mlp(num_classes, in_channels * 28 * 28),
    "lenet5": lambda num_classes, in_channels, conv_algo: lenet5(
        num_classes, in_channels, conv_algo=conv_algo),
    "alexnet-small": lambda num_classes, in_channels, conv_algo: alexnet(
        num_classes, "small", in_channels, conv_algo),
}


def build(name, num_classes=10, in_channels=1, conv_algo="auto"):
    """A model by its CLI name; an unknown name lists the choices."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    return MODELS[name](num_classes, in_channels, conv_algo)


__all__ = ["lenet5", "alexnet", "mlp", "ALEXNET_VARIANTS", "MODELS", "build"]
