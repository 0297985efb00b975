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
from .chunks import batch_chunks, chunk_length
from .layout import nhwc_windows, padded_nhwc, symmetric_pads


def weight_matrix(w):
    """w (K, C, KH, KW) -> W (K, KH*KW*C), the column order of the gather."""
    k = w.shape[0]
    xp = get_array_module(w)
    return xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(k, -1)


def gather_columns(x, geom, out):
    """Fill ``out`` (n*OH*OW, KH*KW*C) with the columns of x (n, C, H, W), channel innermost."""
    xpad = padded_nhwc(x, symmetric_pads(geom))
    view = nhwc_windows(xpad, (geom.kernel_h, geom.kernel_w), (geom.out_h, geom.out_w),
                        geom.stride, geom.dilation)
    out.reshape(view.shape)[...] = view
    return out


def _column_chunks(geom, like):
    return batch_chunks(geom.batch, geom.out_h * geom.out_w * _row_length(geom) * like.itemsize, like)


def _row_length(geom):
    return geom.kernel_h * geom.kernel_w * geom.in_channels


class Im2col(ConvAlgorithm):
    """Unroll + GEMM; supports every stride, padding, dilation and kernel size.

    The batch is processed in chunks (see ``chunks.py``) so that each chunk's
    columns are still in cache when the GEMM reads them; ``keep=True`` fills
    one full column matrix instead, for the weight gradient to reuse.
    """

    name = "im2col"
    reuses = frozenset({"backward_weight"})   # the column matrix

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        n, k, p = geom.batch, geom.out_channels, geom.out_h * geom.out_w
        wmat = weight_matrix(w)
        parts = _column_chunks(geom, x)
        rows = (n if keep else parts[0].stop) * p
        cols = xp.empty((rows, _row_length(geom)), dtype=x.dtype)
        y = xp.empty((n, k, p), dtype=x.dtype)
        for part in parts:
            block = cols[part.start * p:part.stop * p] if keep else cols[:(part.stop - part.start) * p]
            gather_columns(x[part], geom, block)
            xp.matmul(wmat, block.reshape(-1, p, block.shape[1]).transpose(0, 2, 1), out=y[part])
        return y.reshape(geom.output_shape), (cols if keep else None)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        n, k, p = geom.batch, geom.out_channels, geom.out_h * geom.out_w
        dy = dy.reshape(n, k, p)
        dw = xp.zeros((k, _row_length(geom)), dtype=dy.dtype)
        parts = _column_chunks(geom, dy)
        scratch = None if saved is not None else xp.empty(
            ((parts[0].stop - parts[0].start) * p, _row_length(geom)), dtype=dy.dtype)
        for part in parts:
            if saved is not None:
                block = saved[part.start * p:part.stop * p]
            else:
                block = gather_columns(x[part], geom, scratch[:(part.stop - part.start) * p])
            dw += xp.matmul(dy[part], block.reshape(-1, p, block.shape[1])).sum(axis=0)
        dw = dw.reshape(k, geom.kernel_h, geom.kernel_w, -1).transpose(0, 3, 1, 2)
        return xp.ascontiguousarray(dw)

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        n, k = geom.batch, geom.out_channels
        oh, ow = geom.out_h, geom.out_w
        wmat = weight_matrix(w)
        dx = xp.empty(geom.input_shape, dtype=dy.dtype)
        for part in _column_chunks(geom, dy):
            dcols = xp.matmul(dy[part].reshape(-1, k, oh * ow).transpose(0, 2, 1), wmat)
            dx[part] = col2im(dcols.reshape(-1, oh, ow, geom.kernel_h, geom.kernel_w,
                                            geom.in_channels), geom)
        return dx

    def multiplies(self, geom):
        return {"gemm": geom.direct_multiplies(), "total": geom.direct_multiplies()}

    def workspace_bytes(self, geom, pass_, itemsize=4):
        n, c, h, w = geom.input_shape
        p = geom.out_h * geom.out_w
        chunk = chunk_length(n, p * _row_length(geom) * itemsize)
        padded = chunk * c * (h + 2 * geom.padding[0]) * (w + 2 * geom.padding[1])
        cols = chunk * p * _row_length(geom)              # one chunk of columns
        extra = {"forward": 0,
                 "backward_weight": chunk * geom.out_channels * _row_length(geom),
                 "backward_input": cols + chunk * c * h * w}[pass_]   # dcols + col2im's sum
        return itemsize * (padded + cols + extra + geom.out_channels * _row_length(geom))

    def saved_bytes(self, geom, itemsize=4):
        return itemsize * geom.batch * geom.out_h * geom.out_w * _row_length(geom)


def col2im(dcols, geom):
    """Scatter-add columns (n, OH, OW, KH, KW, C) back onto the input: (n, C, H, W)."""
    xp = get_array_module(dcols)
    (sh, sw), (dh, dw), (ph, pw) = geom.stride, geom.dilation, geom.padding
    oh, ow = geom.out_h, geom.out_w
    dxpad = xp.zeros((dcols.shape[0], geom.height + 2 * ph, geom.width + 2 * pw, dcols.shape[-1]),
                     dtype=dcols.dtype)
    for u in range(geom.kernel_h):
        for v in range(geom.kernel_w):
            dxpad[:, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                  v * dw:v * dw + sw * (ow - 1) + 1:sw] += dcols[:, :, :, u, v]
    return dxpad[:, ph:ph + geom.height, pw:pw + geom.width].transpose(0, 3, 1, 2)


IM2COL = Im2col()
