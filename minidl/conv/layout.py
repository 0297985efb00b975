"""Data-layout helpers shared by the algorithms: padding, NCHW<->NHWC/CHWN, sliding windows.

The GEMM-based algorithms gather with the channel innermost (NHWC): each
gathered element then belongs to a contiguous run of C values, which made
the im2col gather ~6x faster than the channel-outermost order on this
machine (notes: machine-baselines §8). For few channels and many small
images, the batch innermost (CHWN) gives longer runs still.
"""

from ..backend import get_array_module


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


def _zero_borders(out, t, b, l, r):
    """Zero the padding frame of an NHWC array whose interior is about to be written."""
    h, w = out.shape[1], out.shape[2]
    out[:, :t] = 0
    out[:, h - b :] = 0
    out[:, t : h - b, :l] = 0
    out[:, t : h - b, w - r :] = 0


def padded_nhwc(x, pads, batch_last=False):
    """x (N, C, H, W) -> (N, t+H+b, l+W+r, C) with zero borders; (C, H', W', N) if ``batch_last``.

    ``pads = (top, bottom, left, right)``; a negative pad crops that side.
    """
    xp = get_array_module(x)
    view, (t, b, l, r) = crop_and_pads(x, pads)
    n, c, h, w = view.shape
    outer, inner = (c, n) if batch_last else (n, c)
    out = xp.empty((outer, t + h + b, l + w + r, inner), dtype=x.dtype)
    _zero_borders(out, t, b, l, r)
    out[:, t : t + h, l : l + w] = view.transpose((1, 2, 3, 0) if batch_last else (0, 2, 3, 1))
    return out


def padded_nchw(x, pads):
    """x (N, C, H, W) -> (N, C, t+H+b, l+W+r) with zero borders (negative pads crop)."""
    xp = get_array_module(x)
    view, (t, b, l, r) = crop_and_pads(x, pads)
    if not (t or b or l or r):
        return view
    return xp.pad(view, ((0, 0), (0, 0), (t, b), (l, r)))


def nhwc_windows(xpad, kernel, out_size, stride, dilation):
    """View (N, OH, OW, KH, KW, C) of the receptive fields of an NHWC array (no copy).

    Element ``[n, i, j, u, v, c] = xpad[n, i*sh + u*dh, j*sw + v*dw, c]``; the
    same for a (C, H, W, N) array, with the roles of N and C exchanged.
    """
    sn, sh, sw, sc = xpad.strides
    n, c = xpad.shape[0], xpad.shape[3]
    return as_strided(
        xpad,
        (n, out_size[0], out_size[1], kernel[0], kernel[1], c),
        (sn, stride[0] * sh, stride[1] * sw, dilation[0] * sh, dilation[1] * sw, sc),
    )


def nhwc_rows(a):
    """a (N, C, H, W) as the (N*H*W, C) matrix of its NHWC rows: a view when ``a`` is
    channels-last in memory (as im2col and Winograd outputs are), else a copy."""
    xp = get_array_module(a)
    rows = a.transpose(0, 2, 3, 1)
    if not rows.flags.c_contiguous:
        rows = xp.ascontiguousarray(rows)
    return rows.reshape(-1, a.shape[1])


def symmetric_pads(geom):
    """(top, bottom, left, right) for the geometry's symmetric padding."""
    ph, pw = geom.padding
    return (ph, ph, pw, pw)
