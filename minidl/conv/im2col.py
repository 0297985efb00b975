"""im2col: unroll the receptive fields into a matrix, then one GEMM (Chellapilla et al. 2006).

Columns are gathered channel-innermost, ``cols[n, i, j, u, v, c] =
xpad[n, c, i*sh + u*dh, j*sw + v*dw]``, so the gather copies contiguous runs of
C values, and the weight is reshaped to match, ``W[k, (u, v, c)]``
(survey App. B.2: A is (C*KH*KW) x (N*OH*OW), F is K x (C*KH*KW), B = F A).

* forward:         ``y[n] = W @ cols[n]^T``                    (K x OH*OW per image)
* weight gradient: ``dW = dY @ cols``, dY as K x (N*OH*OW)
* input gradient:  ``dcols[n] = dY[n]^T @ W`` then col2im, the scatter-add of
  every column back onto the pixels it came from (one strided add per (u, v)).

Multiplies: N*K*C*KH*KW*OH*OW, the same as direct (Table 6); workspace: the
padded input plus the N*OH*OW x C*KH*KW column matrix.
"""
from ..backend import get_array_module
from .base import ConvAlgorithm
from .layout import nchw_from_nhwc, nhwc_windows, padded_nhwc, symmetric_pads


def weight_matrix(w):
    """w (K, C, KH, KW) -> W (K, KH*KW*C), the column order of the gather."""
    k = w.shape[0]
    xp = get_array_module(w)
    return xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(k, -1)


def columns(x, geom):
    """The column matrix (N*OH*OW, KH*KW*C) of x, gathered channel-innermost."""
    xp = get_array_module(x)
    xpad = padded_nhwc(x, symmetric_pads(geom))
    view = nhwc_windows(xpad, (geom.kernel_h, geom.kernel_w), (geom.out_h, geom.out_w),
                        geom.stride, geom.dilation)
    cols = xp.empty(view.shape, dtype=x.dtype)
    cols[...] = view
    return cols.reshape(geom.batch * geom.out_h * geom.out_w, -1)


class Im2col(ConvAlgorithm):
    """Unroll + GEMM; supports every stride, padding, dilation and kernel size."""

    name = "im2col"
    reuses = frozenset({"backward_weight"})   # the column matrix

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        n, k, p = geom.batch, geom.out_channels, geom.out_h * geom.out_w
        cols = columns(x, geom)
        y = xp.empty((n, k, p), dtype=x.dtype)
        xp.matmul(weight_matrix(w), cols.reshape(n, p, -1).transpose(0, 2, 1), out=y)
        return y.reshape(geom.output_shape), (cols if keep else None)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        n, k, p = geom.batch, geom.out_channels, geom.out_h * geom.out_w
        cols = columns(x, geom) if saved is None else saved
        dy_rows = xp.empty((k, n, p), dtype=dy.dtype)   # K x (N*OH*OW), one contiguous copy
        dy_rows[...] = dy.reshape(n, k, p).transpose(1, 0, 2)
        dw = dy_rows.reshape(k, n * p) @ cols
        dw = dw.reshape(k, geom.kernel_h, geom.kernel_w, -1).transpose(0, 3, 1, 2)
        return xp.ascontiguousarray(dw)

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        n, k = geom.batch, geom.out_channels
        oh, ow = geom.out_h, geom.out_w
        dcols = xp.matmul(dy.reshape(n, k, oh * ow).transpose(0, 2, 1), weight_matrix(w))
        dcols = dcols.reshape(n, oh, ow, geom.kernel_h, geom.kernel_w, -1)
        return col2im(dcols, geom)

    def multiplies(self, geom):
        return {"gemm": geom.direct_multiplies(), "total": geom.direct_multiplies()}

    def workspace_bytes(self, geom, pass_, itemsize=4):
        n, c, h, w = geom.input_shape
        padded = n * c * (h + 2 * geom.padding[0]) * (w + 2 * geom.padding[1])
        cols = n * geom.out_h * geom.out_w * c * geom.kernel_h * geom.kernel_w
        rows = geom.out_channels * n * geom.out_h * geom.out_w if pass_ == "backward_weight" else 0
        weights = geom.out_channels * c * geom.kernel_h * geom.kernel_w
        return itemsize * (padded + cols + rows + weights)


def col2im(dcols, geom):
    """Scatter-add columns (N, OH, OW, KH, KW, C) back onto the input (N, C, H, W)."""
    xp = get_array_module(dcols)
    (sh, sw), (dh, dw), (ph, pw) = geom.stride, geom.dilation, geom.padding
    oh, ow = geom.out_h, geom.out_w
    dxpad = xp.zeros((geom.batch, geom.height + 2 * ph, geom.width + 2 * pw, dcols.shape[-1]),
                     dtype=dcols.dtype)
    for u in range(geom.kernel_h):
        for v in range(geom.kernel_w):
            dxpad[:, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                  v * dw:v * dw + sw * (ow - 1) + 1:sw] += dcols[:, :, :, u, v]
    return nchw_from_nhwc(dxpad[:, ph:ph + geom.height, pw:pw + geom.width])


IM2COL = Im2col()
