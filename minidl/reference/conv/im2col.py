"""im2col: unroll the receptive fields into a matrix, then one matrix product
(Chellapilla et al. 2006).

Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep Learning,
App. B.2 / Alg. 4. The column matrix A is (C*KH*KW) x (N*OH*OW): row
(c, u, v), column (n, i, j) holds the input pixel that tap (u, v) of channel c
meets at output (i, j) of image n,

    A[(c, u, v), (n, i, j)] = xpad[n, c, i*sh + u*dh, j*sw + v*dw]

(stride s, dilation d, xpad the input zero-padded by p). The kernel matrix F
is w reshaped to K x (C*KH*KW), whose columns are in the same (c, u, v) order,
and the output matrix B = F A is y reshaped to K x (N*OH*OW). Gradients (the
same products, transposed; Ben-Nun & Hoefler 2019, App. A.4):

    dW = dB A^T                      (dB: dy reshaped like B)
    dA = F^T dB, then col2im: each entry of dA is added back onto the pixel
         of the padded input it was gathered from (scatter-add), and the
         padding is cropped: dx.

Multiplies: N*K*C*KH*KW*OH*OW, as the direct convolution (Ben-Nun & Hoefler 2019, Table 6).

An exercise region here must not call the tuned convolutions (``minidl.conv``,
``minidl.functional.conv``): the check fails one that does, since the exercise is to write
the algorithm out.
"""

from ...backend import get_array_module
from ...conv.base import ConvAlgorithm


def im2col(x, geom):
    """The column matrix A (C*KH*KW, N*OH*OW) of x (N, C, H, W), rows (c, u, v), columns
    (n, i, j)."""
    xp = get_array_module(x)
    n, c = geom.batch, geom.in_channels
    ph, pw = geom.padding
    # BEGIN EXERCISE 3.1
    xpad = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = xp.empty((c, geom.kernel_h, geom.kernel_w, n, geom.out_h, geom.out_w), dtype=x.dtype)
    for u in range(geom.kernel_h):
        for v in range(geom.kernel_w):
            rows, columns = geom.window(u, v)
            cols[:, u, v] = xpad[:, :, rows, columns].transpose(1, 0, 2, 3)
    return cols.reshape(c * geom.kernel_h * geom.kernel_w, n * geom.out_h * geom.out_w)
    # END EXERCISE 3.1


def col2im(cols, geom):
    """dx (N, C, H, W) from dA (C*KH*KW, N*OH*OW): every entry added back onto its input pixel."""
    xp = get_array_module(cols)
    n, c, h, w = geom.input_shape
    ph, pw = geom.padding
    # BEGIN EXERCISE 3.2
    blocks = cols.reshape(c, geom.kernel_h, geom.kernel_w, n, geom.out_h, geom.out_w)
    dxpad = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for u in range(geom.kernel_h):
        for v in range(geom.kernel_w):
            rows, columns = geom.window(u, v)
            dxpad[:, :, rows, columns] += blocks[:, u, v].transpose(1, 0, 2, 3)
    return dxpad[:, :, ph : ph + h, pw : pw + w]
    # END EXERCISE 3.2


def output_matrix(y):
    """y or dy (N, K, OH, OW) as B (K, N*OH*OW), columns (n, i, j)."""
    return y.transpose(1, 0, 2, 3).reshape(y.shape[1], -1)


class Im2colReference(ConvAlgorithm):
    """Textbook im2col: one gather, one GEMM; every stride, padding, dilation and kernel size."""

    name = "im2col_reference"

    def forward(self, x, w, geom, keep=False):
        b = w.reshape(geom.out_channels, -1) @ im2col(x, geom)
        return b.reshape(geom.out_channels, geom.batch, geom.out_h, geom.out_w).transpose(
            1, 0, 2, 3
        ), None

    def backward_input(self, dy, w, geom, saved=None):
        return col2im(w.reshape(geom.out_channels, -1).T @ output_matrix(dy), geom)

    def backward_weight(self, dy, x, geom, saved=None):
        return (output_matrix(dy) @ im2col(x, geom).T).reshape(geom.weight_shape)

    def multiplies(self, geom):
        return {"gemm": geom.direct_multiplies()}

    def workspace_elements(self, geom, pass_, chunk):
        n, c = geom.batch, geom.in_channels
        padded = n * c * geom.padded_size[0] * geom.padded_size[1]
        cols = n * geom.out_h * geom.out_w * c * geom.kernel_h * geom.kernel_w
        outputs = n * geom.out_channels * geom.out_h * geom.out_w
        # forward: xpad, A, B; backward_input: dB copy, dA, dxpad; backward_weight: xpad, A, dB copy
        return padded + cols + outputs


IM2COL_REFERENCE = Im2colReference()
