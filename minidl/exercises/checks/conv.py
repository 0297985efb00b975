"""Checks of the conv exercises: im2col, col2im, direct, FFT and Winograd convolution.

The oracles are written here, in float64, element by element from the
definition (Ben-Nun & Hoefler 2019, Eq. 2), and run no exercise region:
``_columns`` gathers X[c, u, v, n, i, j] = xpad[n, c, i*sh + u*dh, j*sw + v*dw],
``_conv`` contracts it with the kernel, and ``_scatter`` adds a gradient of
that shape back onto the input pixels, one element at a time.
"""

import numpy as np
import scipy.fft

from ...conv import direct as tuned_direct
from ...conv import fft as tuned_fft
from ...conv import im2col as tuned_im2col
from ...conv import winograd as tuned_winograd
from ...conv.geometry import make_geometry
from ...functional import conv as tuned_conv
from ...intmath import ceil_div
from ...reference.conv import direct, fft, im2col, winograd
from .. import exercise, expect_close, expect_equal
from .tuned import call_leaving, forbids

WHY = "the layer's backward and the optimizer use x and w again"

TOLERANCE = dict(rtol=1e-9, atol=1e-9)  # float64 inputs: only rounding may differ
TUNED_CONV = forbids(
    tuned_im2col,
    tuned_direct.Direct,
    tuned_fft.FFT,
    tuned_winograd.Winograd,
    tuned_winograd.winograd_correlation,
    tuned_winograd.blocked_correlation,
    tuned_conv,
    name="minidl's tuned convolutions",
)

# the inverse transforms of NumPy and SciPy: an FFT convolution ends in one of them
INVERSE_FFTS = [
    (module, name)
    for module in (np.fft, scipy.fft)
    for name in ("ifft", "ifft2", "ifftn", "irfft", "irfft2", "irfftn")
]

# (x shape, w shape, stride, padding, dilation): odd sizes, non-square kernels and strides
GENERAL_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 2), (2, 1), (1, 0), (1, 2)),
    ((1, 2, 6, 7), (3, 2, 3, 3), 1, 1, 1),
    ((2, 2, 9, 8), (2, 2, 2, 3), 2, (2, 1), (2, 1)),
]
WINOGRAD_CASES = [
    ((2, 3, 6, 6), (4, 3, 3, 3), 1, 0, 1),  # whole 2x2 tiles
    ((1, 2, 7, 8), (3, 2, 3, 3), 1, 1, 1),  # odd output height: a partial tile
    ((2, 2, 5, 5), (2, 2, 3, 3), 1, 2, 1),
]


def _cases(cases, seed):
    """(x, w, geometry) per case, float64, from a seeded generator."""
    rng = np.random.default_rng(seed)
    for x_shape, w_shape, stride, padding, dilation in cases:
        geom = make_geometry(x_shape, w_shape, stride, padding, dilation)
        yield rng.standard_normal(x_shape), rng.standard_normal(w_shape), geom


def _matrix_shape(geom):
    """(C*KH*KW, N*OH*OW): the shape of the column matrix."""
    return (geom.in_channels * geom.kernel_h * geom.kernel_w, geom.batch * geom.out_h * geom.out_w)


def _columns(x, geom):
    """X (C, KH, KW, N, OH, OW), X[c, u, v, n, i, j] = xpad[n, c, i*sh + u*dh, j*sw + v*dw]."""
    (sh, sw), (ph, pw), (dh, dw) = geom.stride, geom.padding, geom.dilation
    xpad = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.empty(
        (geom.in_channels, geom.kernel_h, geom.kernel_w, geom.batch, geom.out_h, geom.out_w)
    )
    for c, u, v, n, i, j in np.ndindex(out.shape):
        out[c, u, v, n, i, j] = xpad[n, c, i * sh + u * dh, j * sw + v * dw]
    return out


def _conv(x, w, geom):
    """y[n, k, i, j] = sum_{c, u, v} w[k, c, u, v] X[c, u, v, n, i, j]."""
    return np.einsum("kcuv,cuvnij->nkij", w, _columns(x, geom))


def _scatter(blocks, geom):
    """dx (N, C, H, W): each blocks[c, u, v, n, i, j] added onto the pixel that
    X[c, u, v, n, i, j] is."""
    (sh, sw), (ph, pw), (dh, dw) = geom.stride, geom.padding, geom.dilation
    n, c, h, w = geom.input_shape
    dxpad = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    for c_, u, v, n_, i, j in np.ndindex(blocks.shape):
        dxpad[n_, c_, i * sh + u * dh, j * sw + v * dw] += blocks[c_, u, v, n_, i, j]
    return dxpad[:, :, ph : ph + h, pw : pw + w]


def _expect_output(what, algorithm, cases, seed):
    """``algorithm.forward`` equals the definition on every case and leaves x and w alone."""
    for x, w, geom in _cases(cases, seed):
        expected = _conv(x, w, geom)
        got = call_leaving(
            f"{what} of {geom.describe()}", algorithm.forward, {"x": x, "w": w}, WHY, geom=geom
        )
        expect_close(f"{what} of {geom.describe()}", got[0], expected, **TOLERANCE)


@exercise(
    "3.1",
    "im2col: patches into columns",
    path="minidl/reference/conv/im2col.py",
    hint="Pad the input, then for each kernel tap (u, v) copy the strided slice of the padded "
    "input that the tap meets (geom.window(u, v)) into that tap's rows of every channel.",
)
@TUNED_CONV
def check_im2col():
    for x, _w, geom in _cases(GENERAL_CASES, seed=31):
        expected = _columns(x, geom)
        got = call_leaving(
            f"im2col(x) for {geom.describe()}", im2col.im2col, {"x": x}, WHY, geom=geom
        )
        expect_equal(
            f"shape of im2col(x) for {geom.describe()}, (C*KH*KW, N*OH*OW)",
            tuple(np.shape(got)),
            _matrix_shape(geom),
        )
        expect_close(
            f"im2col(x) for {geom.describe()}, indexed (c, u, v, n, i, j)",
            np.reshape(got, expected.shape),
            expected,
            **TOLERANCE,
        )
    _expect_output("im2col convolution", im2col.IM2COL_REFERENCE, GENERAL_CASES, seed=32)


@exercise(
    "3.2",
    "col2im: columns back onto the input (input gradient)",
    path="minidl/reference/conv/im2col.py",
    hint="Undo the gather of exercise 3.1: add each tap's rows back onto the same strided "
    "slice of a zero, padded input gradient, then crop the padding.",
)
@TUNED_CONV
def check_col2im():
    rng = np.random.default_rng(33)
    for _x, w, geom in _cases(GENERAL_CASES, seed=34):
        blocks = rng.standard_normal(
            (geom.in_channels, geom.kernel_h, geom.kernel_w, geom.batch, geom.out_h, geom.out_w)
        )
        expect_close(
            f"col2im(dA) for {geom.describe()}",
            im2col.col2im(blocks.reshape(_matrix_shape(geom)), geom),
            _scatter(blocks, geom),
            **TOLERANCE,
        )
        dy = rng.standard_normal(geom.output_shape)
        expect_close(
            f"input gradient F^T dB through col2im for {geom.describe()}",
            im2col.IM2COL_REFERENCE.backward_input(dy, w, geom),
            _scatter(np.einsum("kcuv,nkij->cuvnij", w, dy), geom),
            **TOLERANCE,
        )


@exercise(
    "3.3",
    "direct convolution: the definition (forward)",
    path="minidl/reference/conv/direct.py",
    hint="Loop over the kernel taps (u, v) and accumulate w[:, :, u, v] (K x C) times the "
    "(C x N*OH*OW) matrix of the inputs that tap meets.",
)
@TUNED_CONV
def check_direct():
    _expect_output("direct convolution", direct.DIRECT_REFERENCE, GENERAL_CASES, seed=35)


@exercise(
    "3.4",
    "FFT convolution: the convolution theorem (forward)",
    path="minidl/reference/conv/fft.py",
    hint="Multiply the input spectra by the conjugated kernel spectra, sum over the channels, "
    "invert (the check scales the inverse FFTs: the output must come out of one), and keep "
    "the valid outputs at the stride.",
)
@TUNED_CONV
def check_fft():
    _expect_output("FFT convolution", fft.FFT_REFERENCE, GENERAL_CASES, seed=36)
    x, w, geom = next(_cases(GENERAL_CASES, seed=30))
    rule = "the inverse FFT of the products of the spectra, not a loop over the kernel taps"
    _expect_scaled("FFT convolution", INVERSE_FFTS, 2.0, fft.FFT_REFERENCE, x, w, geom, rule)


def _tiles_of(x, padding):
    """The 4x4 input tiles (N, C, TH, TW, 4, 4), stepping by 2, of x padded for whole tiles."""
    (ph, pw), (h, w) = padding, x.shape[2:]
    th, tw = ceil_div(h + 2 * ph - 2, 2), ceil_div(w + 2 * pw - 2, 2)
    xpad = np.pad(x, ((0, 0), (0, 0), (ph, 2 * th + 2 - h - ph), (pw, 2 * tw + 2 - w - pw)))
    d = np.empty(x.shape[:2] + (th, tw, 4, 4))
    for i, j in np.ndindex(th, tw):
        d[:, :, i, j] = xpad[:, :, 2 * i : 2 * i + 4, 2 * j : 2 * j + 4]
    return d


def _expect_scaled(what, functions, factor, algorithm, x, w, geom, rule):
    """With the ``functions`` ((module, name) pairs) scaling their results by ``factor``, the
    output of ``algorithm`` must scale too: it is built from them (``rule``), not computed
    another way."""
    originals = [(module, name, getattr(module, name)) for module, name in functions]
    for module, name, original in originals:
        setattr(module, name, lambda *a, f=original, **k: factor * f(*a, **k))
    try:
        got = algorithm.forward(x, w, geom)[0]
    finally:
        for module, name, original in originals:
            setattr(module, name, original)
    names = sorted({name for _, name in functions})
    expect_close(
        f"{what}: the output with every {', '.join(names)} result times {factor} (the output "
        f"must be {rule}, not another convolution)",
        got,
        factor * _conv(x, w, geom),
        **TOLERANCE,
    )


@exercise(
    "3.5",
    "Winograd F(2x2, 3x3): the transforms (forward)",
    path="minidl/reference/conv/winograd.py",
    hint="Transform the tiles (B^T d B) and the kernels (G g G^T), multiply them elementwise "
    "summing over channels, then map each 4x4 product back to its 2x2 outputs (A^T m A).",
)
@TUNED_CONV
def check_winograd():
    b_t, g = winograd.B_T, winograd.G
    for x, w, geom in _cases(WINOGRAD_CASES, seed=38):
        d = _tiles_of(x, geom.padding)
        expect_close(
            f"transform_tiles: V = B^T d B of the {d.shape} tiles of {geom.describe()}",
            winograd.transform_tiles(d, b_t),
            np.einsum("ia,nctsab,jb->nctsij", b_t, d, b_t),
            **TOLERANCE,
        )
        expect_close(
            f"transform_kernels: U = G g G^T of {w.shape} kernels",
            winograd.transform_kernels(w, g),
            np.einsum("ia,kcab,jb->kcij", g, w, g),
            **TOLERANCE,
        )
    _expect_output(
        "Winograd F(2x2, 3x3) convolution", winograd.WINOGRAD_REFERENCE, WINOGRAD_CASES, seed=37
    )
    x, w, geom = next(_cases(WINOGRAD_CASES[1:], seed=39))
    rule = "A^T [sum_c U o V] A of the transformed tiles and kernels"
    algorithm = winograd.WINOGRAD_REFERENCE
    for name, factor in (("transform_tiles", 2.0), ("transform_kernels", 3.0)):
        _expect_scaled(
            "Winograd F(2x2, 3x3)", [(winograd, name)], factor, algorithm, x, w, geom, rule
        )
