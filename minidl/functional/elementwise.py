"""Elementwise functions and their derivatives (Ben-Nun & Hoefler 2019, App. A.2).

exp' = exp, log' = 1/x, sqrt' = 1/(2 sqrt x), ReLU' = [x > 0],
tanh' = 1 - tanh^2, sigmoid' = sigmoid (1 - sigmoid).
"""

from ..autograd import Function, Tensor
from ..backend import get_array_module
from ..chunks import by_rows


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
    """max(x, 0); a large array's rows on several threads (``chunks.by_rows``)."""

    def forward(self, x):
        xp = get_array_module(x)
        self.y = xp.empty_like(x)  # NumPy's: a pooled block costs more at LeNet's sizes
        by_rows(lambda a, out: xp.maximum(a, 0, out=out), x, self.y)
        return self.y

    def backward(self, g):
        xp = get_array_module(g)
        out = xp.empty_like(g)
        by_rows(lambda a, y, out: xp.multiply(a, y > 0, out=out), g, self.y, out)
        return out


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
