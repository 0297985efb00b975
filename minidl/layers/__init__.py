"""Layers: ``Module`` containers and one file per layer family (``from minidl import layers
as L``)."""

from . import init
from .activation import ReLU, Sigmoid, Tanh
from .conv import Conv2d
from .dropout import Dropout
from .flatten import Flatten
from .linear import Linear
from .module import Module, Parameter, Sequential, leaves
from .normalization import BatchNorm1d, BatchNorm2d, LocalResponseNorm
from .pooling import AvgPool2d, GlobalAvgPool2d, MaxPool2d
from .recompute import Recompute, sqrt_segments

__all__ = [
    "Module",
    "Parameter",
    "Sequential",
    "leaves",
    "Linear",
    "Conv2d",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "MaxPool2d",
    "AvgPool2d",
    "GlobalAvgPool2d",
    "Dropout",
    "Flatten",
    "BatchNorm1d",
    "BatchNorm2d",
    "LocalResponseNorm",
    "Recompute",
    "sqrt_segments",
    "init",
]
