"""Plain stochastic gradient descent (Ben-Nun & Hoefler 2019, Table 3, "Learning Rate").

w <- w - lr * g
"""

from ..backend import get_array_module
from .optimizer import Optimizer


class SGD(Optimizer):
    """w <- w - lr * g (with g += weight_decay * w first); PyTorch's ``SGD`` without momentum."""

    def update(self, w, g, state):
        w -= get_array_module(g).multiply(g, self.lr, out=self.scratch(g))
