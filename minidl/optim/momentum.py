"""Momentum (Qian 1999) and Nesterov momentum (Nesterov 1983; Sutskever et al. 2013).

Both keep a velocity buffer b (b = g on the first step, as PyTorch does):
    momentum:  b <- mu b + g;   w <- w - lr b
    Nesterov:  b <- mu b + g;   w <- w - lr (g + mu b)
Ben-Nun & Hoefler's Table 3 writes momentum on weight differences,
w_{t+1} = w_t + mu (w_t - w_{t-1}) - lr g_t, which is the same trajectory for
a constant lr (w_t - w_{t-1} = -lr b_{t-1}); it differs from this form only
when lr changes. Its Nesterov row evaluates the gradient at w - mu v and
applies v_t rather than v_{t+1} (an erratum: the standard look-ahead is
w + mu v); here the gradient is taken at the current weights and the update
is PyTorch's reformulation of the standard rule.
"""

from ..backend import get_array_module
from .optimizer import Optimizer


class Momentum(Optimizer):
    """Heavy-ball momentum; PyTorch's ``SGD(momentum=mu)``."""

    hyper_names = ("lr", "momentum", "weight_decay")

    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        clip_grad_norm: float | None = None,
    ):
        super().__init__(params, lr, weight_decay, clip_grad_norm, momentum=momentum)

    def velocity(self, g, state):
        """b <- mu b + g (b = g on the first step)."""
        b = state.get("momentum_buffer")
        if b is None:
            b = state["momentum_buffer"] = g.copy()
        else:
            b *= self.momentum
            b += g
        return b

    def update(self, w, g, state):
        b = self.velocity(g, state)
        w -= get_array_module(b).multiply(b, self.lr, out=self.scratch(b))


class Nesterov(Momentum):
    """Nesterov accelerated gradient; PyTorch's ``SGD(momentum=mu, nesterov=True)``."""

    def update(self, w, g, state):
        b = self.velocity(g, state)
        step = get_array_module(b).multiply(b, self.momentum, out=self.scratch(b))
        step += g  # lr (g + mu b), operation by operation: the same bits
        step *= self.lr
        w -= step
