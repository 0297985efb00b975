"""Direct convolution: the definition, vectorised over batch and channels.

Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep Learning,
Eq. 2 / Alg. 3 (cross-correlation, indices corrected), with stride s,
padding p and dilation d:

    y[n, k, i, j] = sum_{c, u, v} xpad[n, c, i*sh + u*dh, j*sw + v*dw] * w[k, c, u, v]

The seven loops keep only one in Python: over the KH*KW kernel offsets
(u, v); each offset is one channel contraction over the whole batch, a GEMM
``w[:, :, u, v] (K x C) @ x_shifted (C x N*OH*OW)`` (the input is laid out
channels-first, (C, N, H, W), so that every shifted view is one matrix).
The gradients follow the same loop (Ben-Nun & Hoefler 2019, App. A.4):

    dx_pad[n, c, i*sh + u*dh, j*sw + v*dw] += sum_k w[k, c, u, v] * dy[n, k, i, j]
    dw[k, c, u, v] = sum_{n, i, j} dy[n, k, i, j] * xpad[n, c, i*sh + u*dh, j*sw + v*dw]

Multiplies: N*K*C*KH*KW*OH*OW (Table 6); no workspace beyond the padded input.
"""
from ...backend import get_array_module
from ...conv.base import ConvAlgorithm
from ...conv.layout import padded_nchw, symmetric_pads


def _channels_first(a):
    """(N, C, H, W) -> a (C, N, H, W) copy, so one kernel offset is one (C, N*H*W) matrix."""
    xp = get_array_module(a)
    out = xp.empty((a.shape[1], a.shape[0]) + a.shape[2:], dtype=a.dtype)
    out[...] = a.transpose(1, 0, 2, 3)
    return out


def _shifted(xpad, geom, u, v):
    """The (C, N*OH*OW) matrix of inputs that kernel offset (u, v) multiplies (a copy)."""
    rows, cols = geom.window(u, v)
    return xpad[:, :, rows, cols].reshape(xpad.shape[0], -1)


def _batch_first(a, h, w):
    """(C, N*H*W) or (C, N, H, W) -> a contiguous (N, C, H, W)."""
    xp = get_array_module(a)
    return xp.ascontiguousarray(a.reshape(a.shape[0], -1, h, w).transpose(1, 0, 2, 3))


class Direct(ConvAlgorithm):
    """The definition; supports every stride, padding, dilation and kernel size."""

    name = "direct"

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        xpad = _channels_first(padded_nchw(x, symmetric_pads(geom)))
        # BEGIN EXERCISE 3.3
        y = xp.zeros((geom.out_channels, geom.batch * geom.out_h * geom.out_w), dtype=x.dtype)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                y += w[:, :, u, v] @ _shifted(xpad, geom, u, v)
        return _batch_first(y, geom.out_h, geom.out_w), None
        # END EXERCISE 3.3

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        n, c, h, wd = geom.input_shape
        ph, pw = geom.padding
        dxpad = xp.zeros((c, n, h + 2 * ph, wd + 2 * pw), dtype=dy.dtype)
        dy_rows = _channels_first(dy).reshape(geom.out_channels, -1)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                rows, cols = geom.window(u, v)
                dxpad[:, :, rows, cols] += (w[:, :, u, v].T @ dy_rows).reshape(
                    c, n, geom.out_h, geom.out_w)
        return _batch_first(dxpad[:, :, ph:ph + h, pw:pw + wd], h, wd)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        xpad = _channels_first(padded_nchw(x, symmetric_pads(geom)))
        dy_rows = _channels_first(dy).reshape(geom.out_channels, -1)
        dw = xp.empty(geom.weight_shape, dtype=dy.dtype)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                dw[:, :, u, v] = dy_rows @ _shifted(xpad, geom, u, v).T
        return dw

    def multiplies(self, geom):
        return {"products": geom.direct_multiplies(), "total": geom.direct_multiplies()}

    def workspace_bytes(self, geom, pass_, itemsize=4):
        n, c, h, w = geom.input_shape
        padded = n * c * (h + 2 * geom.padding[0]) * (w + 2 * geom.padding[1])
        inputs, outputs = n * c * geom.out_h * geom.out_w, n * geom.out_channels * geom.out_h * geom.out_w
        elements = {  # padded input (and its channels-first copy), one offset's operands, results
            "forward": 2 * padded + inputs + 2 * outputs,
            "backward_input": padded + inputs + outputs + n * c * h * w,
            "backward_weight": 2 * padded + inputs + outputs}[pass_]
        return itemsize * elements


DIRECT = Direct()
