"""A strided convolution as a stride-1 convolution on its polyphase components (space-to-depth).

With stride s and a kernel of KH = s*q + r taps, write every tap u = s*q + r:

    y[i] = sum_u xpad[s*i + u] w[u] = sum_{q, r} X_r[i + q] w[s*q + r],   X_r[j] = xpad[s*j + r]

so the s*s phases X_r of the padded input become s*s*C channels, the kernel
becomes ceil(KH/s) x ceil(KW/s) taps per phase (zero-padded), and the
stride disappears. AlexNet's 11x11 stride-4 conv1 turns into a 3x3 stride-1
convolution over 48 channels, which Winograd F(4x4, 3x3) computes with about
3x fewer multiplies than the direct 11x11 one (the zero taps cost 12^2/11^2).
"""

from dataclasses import replace

from ..intmath import ceil_div
from .layout import contiguous_copy, padded_nchw


def phase_geometry(geom):
    """The stride-1 problem on the phases: s*s*C channels of (OH + q - 1) x (OW + q - 1) with
    q = ceil(KH / s) taps per phase."""
    (sh, sw), kh, kw = geom.stride, geom.kernel_h, geom.kernel_w
    qh, qw = ceil_div(kh, sh), ceil_div(kw, sw)
    return replace(
        geom,
        in_channels=geom.in_channels * sh * sw,
        height=geom.out_h + qh - 1,
        width=geom.out_w + qw - 1,
        kernel_h=qh,
        kernel_w=qw,
        stride=(1, 1),
        padding=(0, 0),
    )


def space_to_depth(x, geom):
    """x (N, C, H, W) -> its phases (N, s*s*C, H', W'), channels ordered (r_h, r_w, c).

    The result is NCHW-indexed and NHWC in memory (what Winograd's tile gather reads fastest).
    """
    inner = phase_geometry(geom)
    (sh, sw), (ph, pw) = geom.stride, geom.padding
    hq, wq = inner.height, inner.width
    n, c, h, w = x.shape
    xpad = padded_nchw(x, (ph, sh * hq - h - ph, pw, sw * wq - w - pw))  # exactly s*H' x s*W'
    phases = contiguous_copy(xpad.reshape(n, c, hq, sh, wq, sw).transpose(0, 2, 4, 3, 5, 1))
    return phases.reshape(n, hq, wq, -1).transpose(0, 3, 1, 2)


def depth_to_space(dphases, geom):
    """The adjoint of ``space_to_depth``: phase gradients (N, s*s*C, H', W') -> dx (N, C, H, W)."""
    inner = phase_geometry(geom)
    (sh, sw), (ph, pw) = geom.stride, geom.padding
    n, c = dphases.shape[0], geom.in_channels
    grid = dphases.reshape(n, sh, sw, c, inner.height, inner.width).transpose(0, 3, 4, 1, 5, 2)
    grid = grid.reshape(n, c, sh * inner.height, sw * inner.width)
    return contiguous_copy(
        padded_nchw(
            grid, (-ph, ph + geom.height - grid.shape[2], -pw, pw + geom.width - grid.shape[3])
        )
    )


def kernel_to_depth(w, geom):
    """w (K, C, KH, KW) -> (K, s*s*C, qh, qw), zero taps where s*q + r >= KH."""
    inner = phase_geometry(geom)
    (sh, sw), (qh, qw) = geom.stride, (inner.kernel_h, inner.kernel_w)
    k, c, kh, kw = w.shape
    full = padded_nchw(w, (0, sh * qh - kh, 0, sw * qw - kw))
    return full.reshape(k, c, qh, sh, qw, sw).transpose(0, 3, 5, 1, 2, 4).reshape(k, -1, qh, qw)


def kernel_from_depth(dw_phases, geom):
    """The adjoint of ``kernel_to_depth``: (K, s*s*C, qh, qw) -> dw (K, C, KH, KW)."""
    (sh, sw), qh, qw = geom.stride, dw_phases.shape[2], dw_phases.shape[3]
    k, c = dw_phases.shape[0], geom.in_channels
    full = dw_phases.reshape(k, sh, sw, c, qh, qw).transpose(0, 3, 4, 1, 5, 2)
    full = full.reshape(k, c, sh * qh, sw * qw)
    return full[:, :, : geom.kernel_h, : geom.kernel_w].copy()
