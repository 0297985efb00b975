"""RMSProp (Tieleman & Hinton 2012): divide by a running root-mean-square of gradients.

    A <- alpha A + (1 - alpha) g^2;   w <- w - lr g / (sqrt(A) + eps)
PyTorch's ``RMSprop`` (not centred, no momentum). Ben-Nun & Hoefler's Table 3 has the
same form (eps outside the root), with alpha written beta.
"""

from ..backend import get_array_module
from .optimizer import Optimizer


class RMSProp(Optimizer):
    hyper_names = ("lr", "alpha", "eps", "weight_decay")

    def __init__(
        self,
        params,
        lr: float = 0.01,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        clip_grad_norm: float | None = None,
    ):
        super().__init__(params, lr, weight_decay, clip_grad_norm, alpha=alpha, eps=eps)

    def update(self, w, g, state):
        a = self.buffer(state, "square_avg", w)
        a *= self.alpha
        a += (1 - self.alpha) * (g * g)
        w -= self.lr * g / (get_array_module(a).sqrt(a) + self.eps)
