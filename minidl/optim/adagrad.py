"""AdaGrad (Duchi et al. 2011): per-element steps shrink with the sum of squared gradients.

    A <- A + g^2;   w <- w - lr g / (sqrt(A) + eps)
This is PyTorch's ``Adagrad`` (no lr decay, zero initial accumulator). Ben-Nun &
Hoefler's Table 3 (2019) puts eps inside the root, lr g / sqrt(A + eps); with the
default eps = 1e-10 the two differ only where A is near zero.
"""

from ..backend import get_array_module
from .optimizer import Optimizer


class AdaGrad(Optimizer):
    hyper_names = ("lr", "eps", "weight_decay")

    def __init__(
        self,
        params,
        lr: float = 0.01,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        clip_grad_norm: float | None = None,
    ):
        super().__init__(params, lr, weight_decay, clip_grad_norm, eps=eps)

    def update(self, w, g, state):
        a = self.buffer(state, "sum", w)
        a += g * g
        w -= self.lr * g / (get_array_module(a).sqrt(a) + self.eps)
