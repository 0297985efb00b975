"""Differentiable operations on Tensors (``from minidl import functional as F``).

Each op is a ``Function`` with its forward and backward written once against
``xp`` (NumPy or CuPy); the wrappers here validate arguments and call
``Function.apply``.
"""
from .arithmetic import add, sub, mul, div, pow, neg, matmul, unbroadcast
from .reduction import sum, mean, max
from .shape_ops import reshape, transpose, flatten, getitem, concatenate, stack, to
from .elementwise import exp, log, sqrt, relu, tanh, sigmoid
from .loss import softmax, log_softmax, cross_entropy, mse_loss
from .linear import linear
from .conv import conv2d
from .dropout import dropout
from .pooling import max_pool2d, avg_pool2d
from .normalization import batch_norm, local_response_norm

__all__ = [
    "add", "sub", "mul", "div", "pow", "neg", "matmul", "unbroadcast",
    "sum", "mean", "max",
    "reshape", "transpose", "flatten", "getitem", "concatenate", "stack", "to",
    "exp", "log", "sqrt", "relu", "tanh", "sigmoid",
    "softmax", "log_softmax", "cross_entropy", "mse_loss",
    "linear", "conv2d", "dropout", "max_pool2d", "avg_pool2d", "batch_norm", "local_response_norm",
]
