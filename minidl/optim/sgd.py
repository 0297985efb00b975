"""Plain stochastic gradient descent (Ben-Nun & Hoefler 2019, Table 3, "Learning Rate").

w <- w - lr * g
"""

from .optimizer import Optimizer


class SGD(Optimizer):
    """w <- w - lr * g (with g += weight_decay * w first); PyTorch's ``SGD`` without momentum."""

    def update(self, w, g, state):
        w -= self.lr * g
