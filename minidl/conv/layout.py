"""Data-layout helpers shared by the algorithms: padding with a transpose, sliding windows.

The GEMM-based algorithms gather with the channel innermost (NHWC): each
gathered element then belongs to a contiguous run of C values, which made
the im2col gather ~6x faster than the channel-outermost order on this
machine (notes: machine-baselines §8). For few channels and many small
images, the batch innermost (CHWN) gives longer runs still.
"""

import math

from ..backend import empty, get_array_module
from ..chunks import batch_chunks, chunk_threads
from ..parallel import parallel_for

NHWC, CHWN, CNHW, HWNC = (0, 2, 3, 1), (1, 2, 3, 0), (1, 0, 2, 3), (2, 3, 0, 1)
PAD_CHUNK_BYTES = 2**18  # images per chunk of ``padded``: about this many bytes (measured best)


def as_strided(a, shape, strides):
    """A strided view of ``a`` (NumPy or CuPy); the caller guarantees it stays in bounds."""
    xp = get_array_module(a)
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def crop_and_pads(x, pads):
    """Split (top, bottom, left, right) pads into a cropped NCHW view and non-negative pads."""
    top, bottom, left, right = pads
    h, w = x.shape[2], x.shape[3]
    view = x[:, :, max(-top, 0) : h - max(-bottom, 0), max(-left, 0) : w - max(-right, 0)]
    return view, tuple(max(p, 0) for p in pads)


def padded(x, pads, order):
    """x (N, C, H, W) zero-padded by ``pads`` = (top, bottom, left, right), as a new array
    ``x.transpose(order)`` in memory (``NHWC``...); a negative pad crops that side.

    A few images at a time, on the threads of ``minidl/parallel.py``: a transposing copy
    runs at cache speed when one chunk's source stays in L2 (measured on 16x64x56x56 into
    HWNC: 4.3 ms for the batch at once, 2.5 ms image by image, 1.4 ms on two threads).
    """
    xp = get_array_module(x)
    view, (t, b, l, r) = crop_and_pads(x, pads)
    n, c, h, w = view.shape
    shape = (n, c, t + h + b, l + w + r)
    out = empty(tuple(shape[axis] for axis in order), x.dtype, xp, op="conv2d padded input")
    nchw = out.transpose(tuple(order.index(axis) for axis in range(4)))

    nchw[:, :, :t] = 0  # only the frame: the interior is written next
    nchw[:, :, t + h :] = 0
    nchw[:, :, t : t + h, :l] = 0
    nchw[:, :, t : t + h, l + w :] = 0

    def fill(part):
        nchw[part, :, t : t + h, l : l + w] = view[part]

    image_bytes = math.prod(shape[1:]) * x.itemsize
    parts = batch_chunks(n, image_bytes, x, chunk_bytes=PAD_CHUNK_BYTES)
    parallel_for(fill, parts, threads=chunk_threads(n, image_bytes))
    return out


def padded_nchw(x, pads):
    """x (N, C, H, W) -> (N, C, t+H+b, l+W+r) with zero borders (negative pads crop)."""
    view, nonnegative = crop_and_pads(x, pads)
    return padded(view, nonnegative, (0, 1, 2, 3)) if any(nonnegative) else view


def windows(x, geom, batch_last=False):
    """The receptive fields of x (N, C, H, W) padded: a view (N, OH, OW, KH, KW, C) of an NHWC
    copy, or (C, OH, OW, KH, KW, N) of a CHWN copy when ``batch_last``.

    Element ``[n, i, j, u, v, c] = xpad[n, c, i*sh + u*dh, j*sw + v*dw]``.
    """
    xpad = padded(x, symmetric_pads(geom), CHWN if batch_last else NHWC)
    (sn, sh, sw, sc), (n, *_, c) = xpad.strides, xpad.shape
    (s0, s1), (d0, d1) = geom.stride, geom.dilation
    return as_strided(
        xpad,
        (n, geom.out_h, geom.out_w, geom.kernel_h, geom.kernel_w, c),
        (sn, s0 * sh, s1 * sw, d0 * sh, d1 * sw, sc),
    )


def contiguous(a):
    """``a`` itself when C-contiguous, else a C-contiguous copy (from the buffer pool)."""
    return a if a.flags.c_contiguous else contiguous_copy(a)


def contiguous_copy(a, dtype=None, op="conv2d layout copy"):
    """A C-contiguous copy of ``a`` (cast to ``dtype``) in a pooled buffer (``backend.empty``)."""
    out = empty(a.shape, dtype or a.dtype, get_array_module(a), op)
    out[...] = a
    return out


def nhwc_rows(a):
    """a (N, C, H, W) as the (N*H*W, C) matrix of its NHWC rows: a view when ``a`` is
    channels-last in memory (as im2col and Winograd outputs are), else a copy."""
    return contiguous(a.transpose(NHWC)).reshape(-1, a.shape[1])


def symmetric_pads(geom):
    """(top, bottom, left, right) for the geometry's symmetric padding."""
    ph, pw = geom.padding
    return (ph, ph, pw, pw)


def flipped_kernel(w):
    """w (K, C, KH, KW) -> (C, K, KH, KW) rotated by 180 degrees: dx of a stride-1 correlation
    is the correlation of dy with it (``ConvGeometry.transposed``)."""
    return w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
