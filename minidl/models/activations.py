"""The activation choices models accept by name."""

from .. import layers as L

ACTIVATIONS = {"relu": L.ReLU, "tanh": L.Tanh}


def activation_layer(name, model):
    """The activation Module class called ``name``; unknown names list the choices."""
    if name not in ACTIVATIONS:
        raise ValueError(f"{model}: activation {name!r} is not one of {tuple(ACTIVATIONS)}")
    return ACTIVATIONS[name]
