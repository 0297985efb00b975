"""Direct convolution: the definition, vectorised over batch and channels (the reference).

Survey Eq. 2 / Alg. 3 (cross-correlation, indices corrected), with stride s,
padding p and dilation d:

    y[n, k, i, j] = sum_{c, u, v} xpad[n, c, i*sh + u*dh, j*sw + v*dw] * w[k, c, u, v]

The seven loops keep only one in Python: over the KH*KW kernel offsets
(u, v); each offset is one channel contraction, a GEMM ``w[:, :, u, v] @
x_shifted``. The gradients follow the same loop (survey App. A.4):

    dx_pad[n, c, i*sh + u*dh, j*sw + v*dw] += sum_k w[k, c, u, v] * dy[n, k, i, j]
    dw[k, c, u, v] = sum_{n, i, j} dy[n, k, i, j] * xpad[n, c, i*sh + u*dh, j*sw + v*dw]

Multiplies: N*K*C*KH*KW*OH*OW (Table 6); no workspace beyond the padded input.
"""
from ..backend import get_array_module
from .base import ConvAlgorithm
from .layout import padded_nchw, symmetric_pads


def _offset_slices(geom, u, v):
    """The (rows, cols) slices of the padded input that kernel offset (u, v) multiplies."""
    (sh, sw), (dh, dw) = geom.stride, geom.dilation
    return (slice(u * dh, u * dh + sh * (geom.out_h - 1) + 1, sh),
            slice(v * dw, v * dw + sw * (geom.out_w - 1) + 1, sw))


class Direct(ConvAlgorithm):
    """The definition; supports every stride, padding, dilation and kernel size."""

    name = "direct"

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        n, k, p = geom.batch, geom.out_channels, geom.out_h * geom.out_w
        xpad = padded_nchw(x, symmetric_pads(geom))
        y = xp.zeros((n, k, p), dtype=x.dtype)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                rows, cols = _offset_slices(geom, u, v)
                shifted = xpad[:, :, rows, cols].reshape(n, geom.in_channels, p)
                y += w[:, :, u, v] @ shifted
        return y.reshape(geom.output_shape), None

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        n, c, h, wd = geom.input_shape
        ph, pw = geom.padding
        dxpad = xp.zeros((n, c, h + 2 * ph, wd + 2 * pw), dtype=dy.dtype)
        dy3 = dy.reshape(n, geom.out_channels, geom.out_h * geom.out_w)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                rows, cols = _offset_slices(geom, u, v)
                dxpad[:, :, rows, cols] += (w[:, :, u, v].T @ dy3).reshape(
                    n, c, geom.out_h, geom.out_w)
        return xp.ascontiguousarray(dxpad[:, :, ph:ph + h, pw:pw + wd])

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        xpad = padded_nchw(x, symmetric_pads(geom))
        dw = xp.empty(geom.weight_shape, dtype=dy.dtype)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                rows, cols = _offset_slices(geom, u, v)
                dw[:, :, u, v] = xp.tensordot(dy, xpad[:, :, rows, cols], axes=([0, 2, 3], [0, 2, 3]))
        return dw

    def multiplies(self, geom):
        return {"products": geom.direct_multiplies(), "total": geom.direct_multiplies()}

    def workspace_bytes(self, geom, pass_, itemsize=4):
        n, c, h, w = geom.input_shape
        padded = n * c * (h + 2 * geom.padding[0]) * (w + 2 * geom.padding[1])
        p = geom.out_h * geom.out_w
        # one offset's shifted input and one product (the matmul result before it is added)
        per_offset = {"forward": n * c * p + n * geom.out_channels * p,
                      "backward_input": n * c * p,
                      "backward_weight": n * c * p + n * geom.out_channels * p}[pass_]
        return itemsize * (padded + per_offset)


DIRECT = Direct()
