"""Per-layer-type counters: output shapes, MACs, FLOPs, work and depth.

Two conventions (``convention=``):

``"corrected"`` (default) counts every layer at its output, consistently:

* convolution: W = N*C_out*H'*W'*(C_in/g)*K_y*K_x (one multiply-accumulate per
  output value and kernel tap); D = ceil(log2(C_in/g)) + ceil(log2 K_y) +
  ceil(log2 K_x) (Ben-Nun & Hoefler 2019, Table 6). The input gradient is the transposed
  convolution, with the same number of multiply-accumulates as the forward
  pass (Table 4 writes H*W; that equals H'*W' only for stride 1 and "same"
  padding) and depth over C_out/g (Table 4 writes C_in); the weight
  gradient reduces over N*H'*W' (Table 4 repeats the forward depth).
* pooling: W = outputs * (K_y*K_x - 1) comparisons (max) or K_y*K_x
  operations (average); D = ceil(log2 K_y) + ceil(log2 K_x) (Table 4, its
  "K_u" read as K_y).
* fully connected: W = rows*C_in*C_out, D = ceil(log2 C_in); the weight
  gradient reduces over the rows (depth log2 N), the input gradient over
  C_out (Table 4).
* activations, dropout: one operation per value, depth 1 (Table 4).

``"paper"`` reproduces Ben-Nun & Hoefler's LeNet example (§3.3.1, W = 665,832 and
D = 41 per image): convolution and pooling work are taken at the layer's
*input* size (the example's conv2 term is 14*14*16*150 = 470,400, although
the output is 10x10, and its pooling terms are H*W*C*(K^2-1) of the input),
activation and flatten layers are not counted, the depth of a convolution
with a single input channel reduces its K_y*K_x window in one tree
(ceil(log2 25) = 5 for conv1 in the example; Table 6 would give 6), and the
backward rows of Table 4 are read literally.

Costs that Ben-Nun & Hoefler 2019 does not state (bias additions, batch and local
response normalisation) are op counts of the textbook formulas; each
counter's docstring gives them.
"""

from ..conv.geometry import output_size, pair
from ..functional.pooling import pool_geometry
from ..intmath import ceil_div, ceil_log2
from .costs import Counter, elements, register


def _pairs(m, *names):
    """The layer's attributes ``names`` as pairs of ints (an int stands for both axes)."""
    return [pair(getattr(m, name), name, type(m).__name__) for name in names]


def _pool_geometry(m, x_shape):
    """(kernel, stride, padding, output size) of a pooling layer, checked as the op checks them."""
    return pool_geometry(x_shape, m.kernel_size, m.stride, m.padding, type(m).__name__)


def _has_bias(module):
    return getattr(module, "bias", None) is not None


class ShapeMismatch(ValueError):
    """An input shape the layer cannot take; the message names the layer and the fix."""


@register("Linear")
class LinearCounter(Counter):
    """y = x W^T + b over the last axis; rows = all leading axes (the batch)."""

    def output_shape(self, m, x_shape):
        if x_shape[-1] != m.in_features:
            raise ShapeMismatch(
                f"Linear({m.in_features}, {m.out_features}) got an input of shape "
                f"{x_shape} with {x_shape[-1]} features"
            )
        return x_shape[:-1] + (m.out_features,)

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        rows, c_in, c_out = elements(x_shape[:-1]), m.in_features, m.out_features
        macs = rows * c_in * c_out
        bias = rows * c_out if _has_bias(m) else 0
        grad_x = macs if needs_input_grad else 0
        return dict(
            macs=macs,
            forward_flops=2 * macs + bias,
            work=macs,
            depth=ceil_log2(c_in),
            backward_macs=macs + grad_x,
            backward_flops=2 * (macs + grad_x) + bias,
            backward_work=macs + grad_x,
            backward_depth=max(ceil_log2(rows), ceil_log2(c_out) if grad_x else 0),
        )


@register("Conv2d")
class Conv2dCounter(Counter):
    """Cross-correlation with stride, padding, dilation and groups (Ben-Nun & Hoefler 2019,
    Eq. 2, Table 6)."""

    def output_shape(self, m, x_shape):
        if len(x_shape) != 4 or x_shape[1] != m.in_channels:
            raise ShapeMismatch(
                f"Conv2d({m.in_channels}, {m.out_channels}) needs an (N, "
                f"{m.in_channels}, H, W) input, got {x_shape}"
            )
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _pairs(
            m, "kernel_size", "stride", "padding", "dilation"
        )
        oh = output_size(x_shape[2], kh, sh, ph, dh)
        ow = output_size(x_shape[3], kw, sw, pw, dw)
        if oh < 1 or ow < 1:
            raise ShapeMismatch(
                f"Conv2d({m.in_channels}, {m.out_channels}, kernel {kh}x{kw}): "
                f"input {x_shape} is smaller than the kernel"
            )
        return (x_shape[0], m.out_channels, oh, ow)

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        n, _, h, w = x_shape
        _, c_out, oh, ow = y_shape
        kh, kw = _pairs(m, "kernel_size")[0]
        cin_g, cout_g = m.in_channels // m.groups, c_out // m.groups
        taps = cin_g * kh * kw
        macs = n * c_out * oh * ow * taps
        bias = n * c_out * oh * ow if _has_bias(m) else 0
        grad_x = macs if needs_input_grad else 0
        table6 = ceil_log2(cin_g) + ceil_log2(kh) + ceil_log2(kw)
        if convention == "paper":
            at_input = n * c_out * h * w * taps
            depth = ceil_log2(kh * kw) if cin_g == 1 else table6
            work, bwd_work = at_input, at_input + (at_input if needs_input_grad else 0)
            bwd_depth = table6
        else:
            depth, work, bwd_work = table6, macs, macs + grad_x
            bwd_depth = max(
                ceil_log2(n) + ceil_log2(oh) + ceil_log2(ow),
                ceil_log2(cout_g) + ceil_log2(kh) + ceil_log2(kw) if grad_x else 0,
            )
        return dict(
            macs=macs,
            forward_flops=2 * macs + bias,
            work=work,
            depth=depth,
            backward_macs=macs + grad_x,
            backward_flops=2 * (macs + grad_x) + bias,
            backward_work=bwd_work,
            backward_depth=bwd_depth,
        )


@register("MaxPool2d")
class MaxPool2dCounter(Counter):
    """K_y*K_x - 1 comparisons per output; the gradient is routed to one input per output."""

    is_max = True

    def geometry(self, m, x_shape):
        """(kernel, stride, padding, output size)."""
        return _pool_geometry(m, x_shape)

    def output_shape(self, m, x_shape):
        return x_shape[:2] + self.geometry(m, x_shape)[3]

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        (kh, kw), (sh, sw) = self.geometry(m, x_shape)[:2]
        window = kh * kw
        per_out = window - 1 if self.is_max else window
        outputs = elements(y_shape)
        depth = ceil_log2(kh) + ceil_log2(kw)
        grad = (outputs if self.is_max else outputs * window) if needs_input_grad else 0
        if convention == "paper":
            work, bwd_depth = elements(x_shape) * (window - 1), 1 if grad else 0
            bwd_work = elements(x_shape) if grad else 0
        else:
            work, bwd_work = outputs * per_out, grad
            overlap = ceil_div(kh, sh) * ceil_div(kw, sw)  # outputs whose windows share one input
            bwd_depth = 1 + ceil_log2(overlap) if grad else 0
        return dict(
            forward_flops=outputs * per_out,
            backward_flops=grad,
            work=work,
            depth=depth,
            backward_work=bwd_work,
            backward_depth=bwd_depth,
        )


@register("AvgPool2d")
class AvgPool2dCounter(MaxPool2dCounter):
    """K_y*K_x - 1 additions and one scaling per output; the gradient is spread over the window."""

    is_max = False


@register("GlobalAvgPool2d")
class GlobalAvgPool2dCounter(AvgPool2dCounter):
    """An average pool whose window is the whole H x W map."""

    def geometry(self, m, x_shape):
        return x_shape[2:], x_shape[2:], (0, 0), (1, 1)


class ElementwiseCounter(Counter):
    """``forward_ops`` per value; the gradient costs ``backward_ops`` per value (Table 4:
    depth 1)."""

    forward_ops, backward_ops = 1, 1

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        n = elements(x_shape)
        bwd = n * self.backward_ops if needs_input_grad else 0
        if convention == "paper":  # Ben-Nun & Hoefler's LeNet example leaves activations out
            return dict(forward_flops=n * self.forward_ops, backward_flops=bwd)
        return dict(
            forward_flops=n * self.forward_ops,
            backward_flops=bwd,
            work=n * self.forward_ops,
            depth=1,
            backward_work=bwd,
            backward_depth=1 if bwd else 0,
        )


@register("ReLU")
class ReLUCounter(ElementwiseCounter):
    """max(0, x): one comparison; the gradient is one masked multiply."""


@register("Tanh", "Sigmoid")
class SquashCounter(ElementwiseCounter):
    """One transcendental per value; the gradient g*(1-y^2) or g*y*(1-y) is three operations."""

    backward_ops = 3


@register("Dropout")
class DropoutCounter(ElementwiseCounter):
    """Training mode: one multiply by the scaled mask per value, forward and backward."""


@register("_Residual")
class ResidualAddCounter(Counter):
    """A residual block's own work, ``F(x) + shortcut(x)`` (its inner layers are counted
    as layers): one addition per output; in backward, one per input, where the two
    branches' gradients meet."""

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        n, bwd = elements(y_shape), elements(x_shape) if needs_input_grad else 0
        return dict(
            forward_flops=n,
            backward_flops=bwd,
            work=n,
            depth=1,
            backward_work=bwd,
            backward_depth=1 if bwd else 0,
        )


@register("Flatten")
class FlattenCounter(Counter):
    """A reshape: no arithmetic."""

    def output_shape(self, m, x_shape):
        start = m.start_dim % len(x_shape)
        return x_shape[:start] + (elements(x_shape[start:]),)

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        return {}


@register("BatchNorm1d", "BatchNorm2d")
class BatchNormCounter(Counter):
    """Training-mode batch norm over M = N*H*W values per channel (Ben-Nun & Hoefler 2019,
    §3.1.1, App. A.6).

    Forward: mean (1 op per value), variance (3), normalise (2), scale and
    shift (2) = 8 ops per value; two reductions in a row, depth
    2*ceil(log2 M) + 4. Backward: gamma and beta gradients (3 ops per value,
    depth ceil(log2 M) + 1) and the input gradient (6 ops per value, two
    reductions, depth 2*ceil(log2 M) + 3). Table 4 writes O(log N) for all.
    """

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        n = elements(x_shape)
        per_channel = n // x_shape[1]
        red = ceil_log2(per_channel)
        grad_x = 6 * n if needs_input_grad else 0
        return dict(
            forward_flops=8 * n,
            work=8 * n,
            depth=2 * red + 4,
            backward_flops=3 * n + grad_x,
            backward_work=3 * n + grad_x,
            backward_depth=max(red + 1, 2 * red + 3 if grad_x else 0),
        )


@register("LocalResponseNorm")
class LocalResponseNormCounter(Counter):
    """b_i = a_i / (k + alpha/n * sum over n neighbouring channels of a_j^2)^beta (Krizhevsky 2012).

    Forward: n multiply-adds for the window sum, then scale, shift, power
    and divide: n + 4 ops per value, depth ceil(log2 n) + 4. Backward: the
    window sum of g*a*d^(-beta-1) and the combination, n + 7 ops per value,
    depth ceil(log2 n) + 5.
    """

    def count(self, m, x_shape, y_shape, needs_input_grad, convention):
        n, size = elements(x_shape), m.size
        grad = n * (size + 7) if needs_input_grad else 0
        return dict(
            forward_flops=n * (size + 4),
            work=n * (size + 4),
            depth=ceil_log2(size) + 4,
            backward_flops=grad,
            backward_work=grad,
            backward_depth=ceil_log2(size) + 5 if grad else 0,
        )
