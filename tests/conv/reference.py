"""An independent float64 oracle: conv2d and its gradients straight from the definition.

Written without minidl's code: sliding windows + einsum for the output
(Ben-Nun & Hoefler 2019, Eq. 2 with stride, padding, dilation and groups), and the adjoint
loops of App. A.4 for the gradients. Slow, exact to float64 rounding.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def _pad(x, padding):
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))


def _windows(xpad, kernel, stride, dilation):
    """(N, C, OH, OW, KH, KW) receptive fields of a padded NCHW array."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
    return sliding_window_view(xpad, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]


def conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """y[n, k, i, j] = sum_{c,u,v} xpad[n, c, i*sh + u*dh, j*sw + v*dw] w[k, c, u, v] (+ b[k])."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    cg, kg = x.shape[1] // groups, w.shape[0] // groups
    win = _windows(_pad(x, padding), w.shape[2:], stride, dilation)
    y = np.concatenate(
        [
            np.einsum("nchwuv,kcuv->nkhw", win[:, g * cg : (g + 1) * cg], w[g * kg : (g + 1) * kg])
            for g in range(groups)
        ],
        axis=1,
    )
    return y if b is None else y + np.asarray(b, np.float64)[None, :, None, None]


def conv2d_grads(x, w, dy, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """(dx, dw, db) of sum(dy * conv2d(x, w, b)), by the adjoint loops over kernel offsets."""
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    (sh, sw), (ph, pw), (dh, dw_) = stride, padding, dilation
    cg, kg = x.shape[1] // groups, w.shape[0] // groups
    oh, ow = dy.shape[2:]
    xpad = _pad(x, padding)
    dxpad = np.zeros_like(xpad)
    dw = np.zeros_like(w)
    for g in range(groups):
        cs, ks = slice(g * cg, (g + 1) * cg), slice(g * kg, (g + 1) * kg)
        for u in range(w.shape[2]):
            for v in range(w.shape[3]):
                rows = slice(u * dh, u * dh + sh * (oh - 1) + 1, sh)
                cols = slice(v * dw_, v * dw_ + sw * (ow - 1) + 1, sw)
                dxpad[:, cs, rows, cols] += np.einsum("nkij,kc->ncij", dy[:, ks], w[ks, :, u, v])
                dw[ks, :, u, v] = np.einsum("nkij,ncij->kc", dy[:, ks], xpad[:, cs, rows, cols])
    dx = dxpad[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]
    return dx, dw, dy.sum(axis=(0, 2, 3))
