"""Fully connected layer: y = x W^T + b (Ben-Nun & Hoefler 2019, §3.1.1; W is (out, in) as
in PyTorch).

Gradients (Ben-Nun & Hoefler 2019, App. A.3 with its shape erratum corrected):
dx = dy W, dW = dy^T x, db = sum over the batch of dy.

Memory layout: a 2-d y comes out column-major (the transpose of W x^T, the
faster GEMM orientation), and dx is returned in the layout of x. The layer
before combines dx elementwise with arrays laid out like x (ReLU's saved
output, for one), and NumPy runs a product of a row-major and a
column-major array ~8x slower than one of equal layouts (measured here:
165 against 17 us for 128 x 256).
"""

from ..autograd import Function, ShapeError, Tensor
from ..backend import empty, get_array_module
from ..chunks import gemm


class Linear(Function):
    def forward(self, x, w, b=None):
        if x.shape[-1] != w.shape[1]:
            raise ShapeError(
                f"linear: input of shape {x.shape} has {x.shape[-1]} features, "
                f"the weight {w.shape} expects {w.shape[1]}"
            )
        self.x, self.w = x, w
        # y^T = W x^T: OpenBLAS runs this orientation up to ~1.7x faster than x W^T for
        # the short, wide batches of training (e.g. 16 x 9216 by 9216 x 4096)
        y = gemm(w, x.T).T if x.ndim == 2 else x @ w.T
        if b is not None:
            y += b
        return y

    def backward(self, g):
        need_x, need_w = self.needs_input_grad[:2]
        x2 = self.x.reshape(-1, self.x.shape[-1])
        g2 = g.reshape(-1, g.shape[-1])
        gx = None
        if need_x:
            gx = gemm(self.w.T, g2.T).T if _column_major(self.x) else gemm(g2, self.w)
            gx = gx.reshape(self.x.shape)
        gw = None
        if need_w:  # dW in pooled memory: AlexNet's fc6 gradient is 151 MB a step
            xp = get_array_module(g2)
            gw = gemm(g2.T, x2, out=empty((g2.shape[1], x2.shape[1]), g2.dtype, xp, "linear dW"))
        if len(self.needs_input_grad) == 2:
            return gx, gw
        gb = g2.sum(axis=0) if self.needs_input_grad[2] else None
        return gx, gw, gb


def _column_major(a):
    return a.ndim == 2 and a.flags.f_contiguous and not a.flags.c_contiguous


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b for a weight of shape (out_features, in_features)."""
    if bias is None:
        return Linear.apply(x, weight)
    return Linear.apply(x, weight, bias)
