"""Winograd minimal filtering F(2x2, 3x3) (Lavin & Gray 2016, Fast Algorithms for
Convolutional Neural Networks).

Each 2x2 tile Y of one output channel k comes from the 4x4 tile d_c of the
padded input that covers it, in every input channel c (tiles step by 2;
neighbours overlap by 2); with g_kc the 3x3 kernel,

    Y = A^T [ sum_c (G g_kc G^T) o (B^T d_c B) ] A

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

(Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep
Learning, §4.3 / App. B.4 with m = 2, r = 3, alpha = m + r - 1 = 4.) The
elementwise stage costs 16 multiplies per tile and channel pair where the
definition costs 36 (2.25x fewer). An output whose size is odd is computed
on whole tiles (the input padded with zeros) and cropped.

Gradients, for 3x3 kernels at stride 1 and padding p:

* input: dx[n, c, a, b] = sum_{k, u, v} dy[n, k, a + p - u, b + p - v] w[k, c, u, v]
  (dy zero outside). With u' = 2 - u this is a stride-1 correlation of dy
  padded by 2 - p with the kernel rotated by 180 degrees and transposed in
  channels, w'[c, k, u', v'] = w[k, c, 2 - u', 2 - v']: the same Winograd
  F(2x2, 3x3) computes it (a negative padding crops dy).
* weight: computed directly, dW[k, c, u, v] = sum_{n, i, j} dy[n, k, i, j]
  xpad[n, c, i + u, j + v]: each tap's gradient is the correlation of the
  padded input with dy, the direct convolution's weight gradient.

An exercise region here must not call the tuned convolutions (``minidl.conv``,
``minidl.functional.conv``): the check fails one that does, since the exercise is to write
the algorithm out.
"""

import numpy as np

from ...backend import get_array_module
from ...conv.base import ConvAlgorithm
from ...conv.direct import DIRECT
from ...conv.layout import padded_nchw
from ...conv.registry import word_list
from ...conv.winograd import tile_counts

B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def input_tiles(x, padding):
    """The overlapping 4x4 tiles (N, C, TH, TW, 4, 4) of x padded by ``padding`` = (ph, pw).

    A negative padding crops. The bottom and right get the extra zeros that
    make the last tiles whole.
    """
    xp = get_array_module(x)
    (ph, pw), (h, w) = padding, x.shape[2:]
    th, tw = tile_counts(h + 2 * ph - 2, w + 2 * pw - 2, 2)
    xpad = padded_nchw(x, (ph, 2 * th + 2 - h - ph, pw, 2 * tw + 2 - w - pw))
    d = xp.empty(x.shape[:2] + (th, tw, 4, 4), dtype=x.dtype)
    for a in range(4):
        for b in range(4):
            d[..., a, b] = xpad[:, :, a : a + 2 * th : 2, b : b + 2 * tw : 2]
    return d


def transform_tiles(d, b_t):
    """V = B^T d B for every 4x4 input tile d (N, C, TH, TW, 4, 4)."""
    # BEGIN EXERCISE 3.5
    return b_t @ d @ b_t.T
    # END EXERCISE 3.5


def transform_kernels(w, g):
    """U = G g G^T for every 3x3 kernel g of w (K, C, 3, 3): (K, C, 4, 4)."""
    # BEGIN EXERCISE 3.5
    return g @ w @ g.T
    # END EXERCISE 3.5


def winograd_f2x2_3x3(x, w, padding):
    """The stride-1 correlation of x (N, C, H, W), padded by ``padding``, with w (K, C, 3, 3)."""
    xp = get_array_module(x)
    b_t, g, a_t = (xp.asarray(m, dtype=x.dtype) for m in (B_T, G, A_T))
    out_h, out_w = x.shape[2] + 2 * padding[0] - 2, x.shape[3] + 2 * padding[1] - 2
    v = transform_tiles(input_tiles(x, padding), b_t)
    u = transform_kernels(w, g)
    # BEGIN EXERCISE 3.5
    m = xp.einsum("kcab,nctsab->nktsab", u, v)  # elementwise products summed over c
    y = a_t @ m @ a_t.T  # (N, K, TH, TW, 2, 2)
    n, k, th, tw = y.shape[:4]
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, k, 2 * th, 2 * tw)[:, :, :out_h, :out_w]
    # END EXERCISE 3.5


class WinogradReference(ConvAlgorithm):
    """Textbook F(2x2, 3x3): 3x3 kernels at stride 1 and dilation 1, any padding."""

    name = "winograd_reference"

    def unsupported(self, geom):
        problems = []
        if (geom.kernel_h, geom.kernel_w) != (3, 3):
            problems.append(f"a {geom.kernel_h}x{geom.kernel_w} kernel")
        if geom.stride != (1, 1):
            problems.append(f"stride {geom.stride}")
        if geom.dilation != (1, 1):
            problems.append(f"dilation {geom.dilation}")
        if not problems:
            return None
        listed = word_list(problems, "and")
        return (
            f"F(2x2, 3x3) takes 3x3 kernels at stride 1 and dilation 1 only, not {listed} "
            "('im2col_reference' and 'fft_reference' compute every shape, the tuned "
            "'winograd_f2x2_3x3' also strided kernels with 3 taps per stride phase)"
        )

    def forward(self, x, w, geom, keep=False):
        return winograd_f2x2_3x3(x, w, geom.padding), None

    def backward_input(self, dy, w, geom, saved=None):
        rotated = w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3)
        return winograd_f2x2_3x3(dy, rotated, (2 - geom.padding[0], 2 - geom.padding[1]))

    def backward_weight(self, dy, x, geom, saved=None):
        return DIRECT.backward_weight(dy, x, geom)

    def multiplies(self, geom):
        """Per tile: B^T d B 2*4^3, A^T M A 4*4*2 + 2*4*2; per kernel: G g G^T 4*3*3 + 4*3*4."""
        th, tw = tile_counts(geom.out_h, geom.out_w, 2)
        p = geom.batch * th * tw
        k, c = geom.out_channels, geom.in_channels
        return {
            "elementwise": 16 * k * c * p,
            "input_transform": 128 * c * p,
            "weight_transform": 84 * k * c,
            "output_transform": 48 * k * p,
        }

    def workspace_elements(self, geom, pass_, chunk):
        n, c, k = geom.batch, geom.in_channels, geom.out_channels
        if pass_ == "backward_weight":
            return DIRECT.workspace_elements(geom, pass_, chunk)
        if pass_ == "backward_input":  # a correlation of dy (K channels) whose output is H x W
            c, k, out = k, c, (geom.height, geom.width)
        else:
            out = (geom.out_h, geom.out_w)
        th, tw = tile_counts(*out, 2)
        tiles = n * th * tw
        padded = n * c * (2 * th + 2) * (2 * tw + 2)
        # padded input, d, B^T d and V, U (and G g), M, A^T M, Y and its reshaped copy
        return padded + 3 * 16 * c * tiles + 2 * 16 * k * c + (16 + 8 + 4 + 4) * k * tiles


WINOGRAD_REFERENCE = WinogradReference()
