"""Layers: ``Module`` containers and one file per layer family (``from minidl import layers as L``)."""
from .module import Module, Parameter, Sequential
from .linear import Linear
from .conv import Conv2d
from .activation import ReLU, Tanh, Sigmoid
from .pooling import MaxPool2d, AvgPool2d
from .dropout import Dropout
from .flatten import Flatten
from .normalization import BatchNorm1d, BatchNorm2d, LocalResponseNorm
from . import init

__all__ = ["Module", "Parameter", "Sequential", "Linear", "Conv2d", "ReLU", "Tanh", "Sigmoid",
           "MaxPool2d", "AvgPool2d", "Dropout", "Flatten", "BatchNorm1d", "BatchNorm2d",
           "LocalResponseNorm", "init"]
