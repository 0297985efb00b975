"""Fully connected layer y = x W^T + b (see ``functional.linear``)."""

import numpy as np

from .. import functional as F
from ..autograd import as_dtype
from . import init
from .checks import int_arg
from .module import Module, Parameter


class Linear(Module):
    """W of shape (out_features, in_features), PyTorch's default initialisation."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype: str = "float32"
    ):
        super().__init__()
        self.in_features = int_arg(
            "Linear", "in_features", in_features, hint="the input's features, x.shape[-1]"
        )
        self.out_features = int_arg("Linear", "out_features", out_features)
        dtype = as_dtype(dtype)
        self.weight = Parameter(np.empty((self.out_features, self.in_features), dtype=dtype))
        self.bias = Parameter(np.empty(self.out_features, dtype=dtype)) if bias else None
        init.default_init_(self.weight, self.bias)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"
