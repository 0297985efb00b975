"""Direct convolution: the definition, one matrix product per kernel tap.

Ben-Nun & Hoefler 2019, Eq. 2 / Alg. 3 (cross-correlation, indices corrected), with stride s,
padding p and dilation d:

    y[n, k, i, j] = sum_{c, u, v} xpad[n, c, i*sh + u*dh, j*sw + v*dw] * w[k, c, u, v]

The seven loops keep only one in Python: over the KH*KW kernel taps (u, v);
each tap is one channel contraction over the whole batch, a GEMM
``w[:, :, u, v] (K x C) @ x_shifted (C x N*OH*OW)`` (the input is laid out
channels-first, (C, N, H, W), so that every shifted view is one matrix).
The gradients follow the same loop (Ben-Nun & Hoefler 2019, App. A.4):

    dx_pad[n, c, i*sh + u*dh, j*sw + v*dw] += sum_k w[k, c, u, v] * dy[n, k, i, j]
    dw[k, c, u, v] = sum_{n, i, j} dy[n, k, i, j] * xpad[n, c, i*sh + u*dh, j*sw + v*dw]

Multiplies: N*K*C*KH*KW*OH*OW (Table 6); no workspace beyond the padded input.
"""

from ..backend import get_array_module, zeros
from .base import ConvAlgorithm
from .layout import CNHW, contiguous_copy, padded, symmetric_pads


def padded_channels_first(x, geom):
    """The zero-padded input, channels first: (C, N, H + 2*ph, W + 2*pw)."""
    return padded(x, symmetric_pads(geom), CNHW)


def gradient_rows(dy):
    """dy (N, K, OH, OW) as the (K, N*OH*OW) matrix whose rows are its channels (a copy)."""
    return padded(dy, (0, 0, 0, 0), CNHW).reshape(dy.shape[1], -1)


def shifted(xpad, geom, u, v):
    """The (C, N*OH*OW) matrix of inputs that kernel tap (u, v) multiplies (a copy)."""
    rows, cols = geom.window(u, v)
    return xpad[:, :, rows, cols].reshape(xpad.shape[0], -1)


def batch_first(a, h, w):
    """(C, N*H*W) or (C, N, H, W) -> a contiguous (N, C, H, W)."""
    return contiguous_copy(a.reshape(a.shape[0], -1, h, w).transpose(1, 0, 2, 3))


class Direct(ConvAlgorithm):
    """The definition; supports every stride, padding, dilation and kernel size."""

    name = "direct"

    def forward(self, x, w, geom, keep=False):
        xpad = padded_channels_first(x, geom)
        shape = (geom.out_channels, geom.batch * geom.out_h * geom.out_w)
        y = zeros(shape, x.dtype, get_array_module(x), "direct conv output")
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                y += w[:, :, u, v] @ shifted(xpad, geom, u, v)
        return batch_first(y, geom.out_h, geom.out_w), None

    def backward_input(self, dy, w, geom, saved=None):
        n, c, h, wd = geom.input_shape
        ph, pw = geom.padding
        shape = (c, n) + geom.padded_size
        dxpad = zeros(shape, dy.dtype, get_array_module(dy), "direct conv input gradient")
        dy_rows, tap_shape = gradient_rows(dy), (c, n, geom.out_h, geom.out_w)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                rows, cols = geom.window(u, v)
                dxpad[:, :, rows, cols] += (w[:, :, u, v].T @ dy_rows).reshape(tap_shape)
        return batch_first(dxpad[:, :, ph : ph + h, pw : pw + wd], h, wd)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        xpad = padded_channels_first(x, geom)
        dy_rows = gradient_rows(dy)
        dw = xp.empty(geom.weight_shape, dtype=dy.dtype)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                dw[:, :, u, v] = dy_rows @ shifted(xpad, geom, u, v).T
        return dw

    def multiplies(self, geom):
        return {"products": geom.direct_multiplies()}

    def workspace_elements(self, geom, pass_, chunk):
        n, c, h, w = geom.input_shape
        padded = n * c * geom.padded_size[0] * geom.padded_size[1]
        outputs = n * geom.out_channels * geom.out_h * geom.out_w
        inputs = n * c * geom.out_h * geom.out_w
        return {  # padded input (or its gradient), one tap's operands, results
            "forward": padded + inputs + 2 * outputs,
            "backward_input": padded + inputs + outputs + n * c * h * w,
            "backward_weight": padded + inputs + outputs,
        }[pass_]


DIRECT = Direct()
