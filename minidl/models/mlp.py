"""A multi-layer perceptron for flattened images: the course's first model."""

from .. import layers as L
from .activations import activation_layer


def mlp(
    num_classes: int = 10,
    in_features: int = 784,
    hidden: tuple[int, ...] = (256, 256),
    activation: str = "relu",
) -> L.Sequential:
    """Flatten -> (Linear -> activation) per hidden width -> Linear."""
    act = activation_layer(activation, "mlp")
    widths = (in_features,) + tuple(hidden)
    layers = [L.Flatten()]
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [L.Linear(a, b), act()]
    return L.Sequential(*layers, L.Linear(widths[-1], num_classes))
