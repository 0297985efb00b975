"""Differentiable operations on Tensors (``from minidl import functional as F``).

Each op is a ``Function`` with its forward and backward written once against
``xp`` (NumPy or CuPy); the wrappers here validate arguments and call
``Function.apply``.
"""

from .arithmetic import add, div, matmul, mul, neg, pow, sub, unbroadcast
from .conv import conv2d
from .dropout import dropout
from .elementwise import exp, log, relu, sigmoid, sqrt, tanh
from .linear import linear
from .loss import cross_entropy, log_softmax, mse_loss, softmax
from .normalization import batch_norm, local_response_norm
from .pooling import avg_pool2d, max_pool2d
from .reduction import max, mean, sum
from .shape_ops import concatenate, flatten, getitem, reshape, stack, to, transpose

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "neg",
    "matmul",
    "unbroadcast",
    "sum",
    "mean",
    "max",
    "reshape",
    "transpose",
    "flatten",
    "getitem",
    "concatenate",
    "stack",
    "to",
    "exp",
    "log",
    "sqrt",
    "relu",
    "tanh",
    "sigmoid",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "mse_loss",
    "linear",
    "conv2d",
    "dropout",
    "max_pool2d",
    "avg_pool2d",
    "batch_norm",
    "local_response_norm",
]
