"""Adam (Kingma & Ba 2015): momentum on g and on g^2, with bias correction.

    m <- b1 m + (1 - b1) g;   v <- b2 v + (1 - b2) g^2;   t <- t + 1
    w <- w - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
This is the original algorithm and PyTorch's ``Adam``. Ben-Nun & Hoefler's Table 3
differs twice: it puts eps inside the root, sqrt(v_hat + eps), and folds the
bias correction into the recursion (the corrected moments feed the next
step), which changes the trajectory after the first step. Its 1 - b^t
denominators also need t to start at 1, as here.
"""

import math

from ..backend import get_array_module
from .optimizer import Optimizer


class Adam(Optimizer):
    hyper_names = ("lr", "betas", "eps", "weight_decay")

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        clip_grad_norm: float | None = None,
    ):
        super().__init__(params, lr, weight_decay, clip_grad_norm, betas=tuple(betas), eps=eps)

    def check_hyper(self):
        super().check_hyper()
        if len(self.betas) != 2 or not all(b < 1.0 for b in self.betas):
            raise ValueError(f"Adam: betas {self.betas} must be two numbers in [0, 1)")

    def update(self, w, g, state):
        b1, b2 = self.betas
        m = self.buffer(state, "exp_avg", w)
        v = self.buffer(state, "exp_avg_sq", w)
        t = state["step"] = state.get("step", 0) + 1
        xp, term, denom = get_array_module(w), self.scratch(g), self.scratch(v)
        m *= b1
        m += xp.multiply(g, 1 - b1, out=term)
        v *= b2
        term = xp.multiply(g, g, out=term)
        term *= 1 - b2
        v += term
        denom = xp.sqrt(v, out=denom)
        denom *= 1.0 / math.sqrt(1 - b2**t)
        denom += self.eps
        term = xp.multiply(m, self.lr / (1 - b1**t), out=term)
        term /= denom
        w -= term
