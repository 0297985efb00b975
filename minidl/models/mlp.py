"""A multi-layer perceptron for flattened images: the course's first model."""
from .. import layers as L


def mlp(num_classes=10, in_features=784, hidden=(256, 256)):
    """Flatten -> (Linear -> ReLU) per hidden width -> Linear."""
    widths = (in_features,) + tuple(hidden)
    layers = [L.Flatten()]
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [L.Linear(a, b), L.ReLU()]
    return L.Sequential(*layers, L.Linear(widths[-1], num_classes))
