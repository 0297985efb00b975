"""im2col: unroll the receptive fields into a matrix, then one GEMM (Chellapilla et al. 2006).

Survey App. B.2: the column matrix A is (C*KH*KW) x (N*OH*OW), the kernel
matrix F = w reshaped to K x (C*KH*KW), and the output B = F A. The rows of
A are ordered (u, v, c); its columns are the output positions, in one of two
memory layouts, whichever gives the gather the longer contiguous runs:

* channel-innermost (NHWC), columns (n, i, j): each window row is KW*C
  contiguous values (6x faster than the channel-outermost order on this
  machine, notes: machine-baselines §8); A is stored transposed, (N*OH*OW, R).
* batch-innermost (CHWN), columns (i, j, n): runs of OW*N values, which wins
  for small images with few channels and large batches (LeNet: 5 or 30 values
  per run against 640 or more); A is stored (R, OH*OW*N).

Passes, each computed in the order A is stored:

* forward:         B = F A       (B^T = A^T F^T for NHWC)
* weight gradient: dF = dB A^T   (dB: dy arranged like A's columns)
* input gradient:  dA = F^T dB, then col2im: every column of dA is added back
  onto the pixels it came from, one strided add per kernel offset (u, v).

The batch runs in chunks (``chunks.py``) so that a chunk's columns are still
in cache for its GEMM; ``keep=True`` keeps every chunk's columns for the
weight gradient. Multiplies: N*K*C*KH*KW*OH*OW, as direct (Table 6).
"""
from ..backend import get_array_module
from .base import ConvAlgorithm
from .chunks import batch_chunks, chunk_length
from .layout import nhwc_windows, padded_nhwc, symmetric_pads


def weight_matrix(w):
    """F (K, KH*KW*C) with columns in the (u, v, c) order of A's rows."""
    k = w.shape[0]
    xp = get_array_module(w)
    return xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(k, -1)


def batch_innermost(geom, n):
    """True when the CHWN gather has longer contiguous runs than the NHWC one."""
    nhwc_run = geom.in_channels * (geom.kernel_w if geom.dilation[1] == 1 else 1)
    chwn_run = n * (geom.out_w if geom.stride[1] == 1 else 1)
    return chwn_run > nhwc_run


def columns(x, geom, buffer):
    """The column matrix A (KH*KW*C, n*OH*OW) of x (n, C, H, W), stored in ``buffer`` (1-D).

    Its columns are ordered (i, j, n) when ``batch_innermost``, else (n, i, j).
    """
    n = x.shape[0]
    last = batch_innermost(geom, n)
    xpad = padded_nhwc(x, symmetric_pads(geom), batch_last=last)
    view = nhwc_windows(xpad, (geom.kernel_h, geom.kernel_w), (geom.out_h, geom.out_w),
                        geom.stride, geom.dilation)
    size = n * geom.out_h * geom.out_w * _row_length(geom)
    if last:
        view = view.transpose(3, 4, 0, 1, 2, 5)                 # (u, v, c, i, j, n)
    out = buffer[:size].reshape(view.shape)
    out[...] = view
    return out.reshape(_row_length(geom), -1) if last else out.reshape(-1, _row_length(geom)).T


def output_rows(dy, geom):
    """dy (n, K, OH, OW) as dB (K, n*OH*OW), its columns in the order ``columns`` uses."""
    xp = get_array_module(dy)
    n, k = dy.shape[:2]
    block = dy.reshape(n, k, -1)
    if batch_innermost(geom, n):
        order = (1, 2, 0)
    elif n == 1:
        return block[0]
    else:
        order = (1, 0, 2)
    rows = xp.empty(tuple(block.shape[i] for i in order), dtype=dy.dtype)
    rows[...] = block.transpose(order)
    return rows.reshape(k, -1)


def _row_length(geom):
    return geom.kernel_h * geom.kernel_w * geom.in_channels


def _chunks(geom, like):
    return batch_chunks(geom.batch, geom.out_h * geom.out_w * _row_length(geom) * like.itemsize, like)


class Im2col(ConvAlgorithm):
    """Unroll + GEMM; supports every stride, padding, dilation and kernel size."""

    name = "im2col"
    reuses = frozenset({"backward_weight"})   # the column matrices

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        n, k, p = geom.batch, geom.out_channels, geom.out_h * geom.out_w
        f = weight_matrix(w)
        f_t = f.T.copy()
        parts = _chunks(geom, x)
        per_image = p * _row_length(geom)
        buffer = xp.empty((n if keep else parts[0].stop) * per_image, dtype=x.dtype)
        y = xp.empty((n, k, p), dtype=x.dtype)
        saved = []
        for part in parts:
            a = columns(x[part], geom, buffer[part.start * per_image if keep else 0:])
            if batch_innermost(geom, part.stop - part.start):
                y[part] = (f @ a).reshape(k, p, -1).transpose(2, 0, 1)
            else:
                y[part] = (a.T @ f_t).reshape(-1, p, k).transpose(0, 2, 1)
            saved.append(a)
        return y.reshape(geom.output_shape), (saved if keep else None)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        k, r = geom.out_channels, _row_length(geom)
        dw = xp.zeros((k, r), dtype=dy.dtype)
        scratch = None
        for i, part in enumerate(_chunks(geom, dy)):
            if saved is not None:
                a = saved[i]
            else:
                if scratch is None:
                    scratch = xp.empty(_columns_size(geom, part), dtype=dy.dtype)
                a = columns(x[part], geom, scratch)
            db = output_rows(dy[part], geom)
            # a very long, thin product (LeNet conv1: 6 x 41552 x 25) runs ~3x faster in blocks
            step = 4096 if a.shape[1] > 8 * k * r else a.shape[1]
            for start in range(0, a.shape[1], step):
                dw += db[:, start:start + step] @ a[:, start:start + step].T
        dw = dw.reshape(k, geom.kernel_h, geom.kernel_w, -1).transpose(0, 3, 1, 2)
        return xp.ascontiguousarray(dw)

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        f_t = weight_matrix(w).T
        dx = xp.empty(geom.input_shape, dtype=dy.dtype)
        for part in _chunks(geom, dy):
            dx[part] = col2im(f_t @ output_rows(dy[part], geom), geom, part.stop - part.start)
        return dx

    def multiplies(self, geom):
        return {"gemm": geom.direct_multiplies(), "total": geom.direct_multiplies()}

    def workspace_bytes(self, geom, pass_, itemsize=4):
        n, c, h, w = geom.input_shape
        p = geom.out_h * geom.out_w
        chunk = chunk_length(n, p * _row_length(geom) * itemsize)
        padded = chunk * c * (h + 2 * geom.padding[0]) * (w + 2 * geom.padding[1])
        cols = chunk * p * _row_length(geom)              # one chunk of columns
        outputs = 2 * chunk * geom.out_channels * p       # GEMM result before its NCHW copy
        extra = {"forward": outputs,
                 "backward_weight": outputs + geom.out_channels * _row_length(geom),
                 "backward_input": outputs + cols + chunk * c * h * w}[pass_]   # dA + col2im
        return itemsize * (padded + cols + extra + geom.out_channels * _row_length(geom))

    def saved_bytes(self, geom, itemsize=4):
        return itemsize * geom.batch * geom.out_h * geom.out_w * _row_length(geom)


def _columns_size(geom, part):
    """Elements of the column matrix of a chunk of the batch."""
    return (part.stop - part.start) * geom.out_h * geom.out_w * _row_length(geom)


def col2im(da, geom, n):
    """Add the columns dA (KH*KW*C, n*OH*OW) back onto the input: dx (n, C, H, W).

    dA's rows are (u, v, c), so each kernel offset is one contiguous block,
    added into an accumulator laid out like A's columns: (C, H, W, n) when
    ``batch_innermost`` (runs of OW*n values), else (C, n, H, W).
    """
    xp = get_array_module(da)
    (sh, sw), (dh, dw), (ph, pw) = geom.stride, geom.dilation, geom.padding
    oh, ow, c = geom.out_h, geom.out_w, geom.in_channels
    hp, wp = geom.height + 2 * ph, geom.width + 2 * pw
    last = batch_innermost(geom, n)
    blocks = da.reshape((geom.kernel_h, geom.kernel_w, c) + ((oh, ow, n) if last else (n, oh, ow)))
    acc = xp.zeros((c, hp, wp, n) if last else (c, n, hp, wp), dtype=da.dtype)
    spatial = acc.transpose(0, 3, 1, 2) if last else acc        # (C, n, H', W') views
    for u in range(geom.kernel_h):
        for v in range(geom.kernel_w):
            block = blocks[u, v].transpose(0, 3, 1, 2) if last else blocks[u, v]
            spatial[:, :, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                    v * dw:v * dw + sw * (ow - 1) + 1:sw] += block
    return spatial[:, :, ph:ph + geom.height, pw:pw + geom.width].transpose(1, 0, 2, 3)


IM2COL = Im2col()
