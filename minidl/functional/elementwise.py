"""Elementwise functions and their derivatives (Ben-Nun & Hoefler 2019, App. A.2).

exp' = exp, log' = 1/x, sqrt' = 1/(2 sqrt x), ReLU' = [x > 0],
tanh' = 1 - tanh^2, sigmoid' = sigmoid (1 - sigmoid).
"""

from ..autograd import Function, Tensor
from ..backend import get_array_module


class Exp(Function):
    def forward(self, x):
        self.y = get_array_module(x).exp(x)
        return self.y

    def backward(self, g):
        return g * self.y


class Log(Function):
    def forward(self, x):
        self.x = x
        return get_array_module(x).log(x)

    def backward(self, g):
        return g / self.x


class Sqrt(Function):
    def forward(self, x):
        self.y = get_array_module(x).sqrt(x)
        return self.y

    def backward(self, g):
        return g / (2 * self.y)


class ReLU(Function):
    def forward(self, x):
        self.y = get_array_module(x).maximum(x, 0)
        return self.y

    def backward(self, g):
        return g * (self.y > 0)


class Tanh(Function):
    def forward(self, x):
        self.y = get_array_module(x).tanh(x)
        return self.y

    def backward(self, g):
        return g * (1 - self.y * self.y)


class Sigmoid(Function):
    """sigmoid(x) = 1 / (1 + e^-x), computed as (1 + tanh(x/2)) / 2 to avoid overflow."""

    def forward(self, x):
        self.y = get_array_module(x).tanh(x * 0.5) * 0.5 + 0.5
        return self.y

    def backward(self, g):
        return g * self.y * (1 - self.y)


def exp(x: Tensor) -> Tensor:
    return Exp.apply(x)


def log(x: Tensor) -> Tensor:
    """Natural logarithm."""
    return Log.apply(x)


def sqrt(x: Tensor) -> Tensor:
    return Sqrt.apply(x)


def relu(x: Tensor) -> Tensor:
    """max(x, 0)."""
    return ReLU.apply(x)


def tanh(x: Tensor) -> Tensor:
    return Tanh.apply(x)


def sigmoid(x: Tensor) -> Tensor:
    """The logistic function 1 / (1 + e^-x)."""
    return Sigmoid.apply(x)
