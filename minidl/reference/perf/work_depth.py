"""Work and depth of the layers of a CNN, forward pass (Ben-Nun & Hoefler 2019, §2.5,
Tables 4 and 6).

The work W of a computation is its number of elementary operations (one per
multiply-accumulate of a product, one per comparison of a max); its depth D
is the longest chain of operations that depend on each other. A sum of n
values computed as a balanced tree has depth ceil(log2 n) (§2.5). A network
is a chain of layers, so works and depths add up (§3.3.1). W is the time on
one processor, D the time on infinitely many, W/D the average parallelism.

Shapes are NCHW; a convolution or pooling window of K_y x K_x with stride S
and zero padding P gives (App. A.4, whose minus sign some copies lose)

    H' = floor((H - K_y + 2 P_y) / S_y) + 1,   W' = floor((W - K_x + 2 P_x) / S_x) + 1

    convolution (Table 6, direct and im2col alike), G groups of channels:
        W = N C_out H' W' (C_in / G) K_y K_x
        D = ceil(log2 (C_in / G)) + ceil(log2 K_y) + ceil(log2 K_x)
    fully connected, N rows (Table 4):
        W = N C_in C_out,   D = ceil(log2 C_in)
    max pooling (Table 4): K_y K_x - 1 comparisons per output,
        W = N C H' W' (K_y K_x - 1),   D = ceil(log2 K_y) + ceil(log2 K_x)
    average pooling: K_y K_x - 1 additions and one scaling per output,
        W = N C H' W' K_y K_x, the same D
    activation (Table 4): one operation per value,
        W = N C H W,   D = 1

Biases are not counted, as in Ben-Nun & Hoefler 2019. The paper's grouped convolution
is G = 1; with G groups each output sums over C_in / G input channels.
Table 4 writes the pooling depth with "K_u", a typo for K_y.

Ben-Nun & Hoefler's LeNet example (§3.3.1: W = 665,832, D = 41 per image) does not
follow these formulas throughout: it counts its second convolution at the
input size (14 * 14 * 16 * 150 = 470,400, where the 10 x 10 output gives
240,000) and pooling at the input size, and gives its first convolution
depth ceil(log2 25) = 5 where Table 6 gives 6. Here every layer is counted
at its output, as Table 6 does.

An exercise region here must not call minidl's tuned cost model
(``minidl.perf.count_model``): the check fails one that does, since the exercise is to write
the algorithm out.
"""

import math

from ...conv.geometry import output_size, pair
from ...intmath import ceil_log2 as tree_depth  # a balanced tree sums n values in ceil(log2 n)


def conv2d_work_depth(x_shape, out_channels, kernel_size, stride=1, padding=0, groups=1):
    """(W, D) of a convolution of an (N, C_in, H, W) input into ``out_channels`` channels."""
    n, c_in, h, w = x_shape
    (ky, kx), (sy, sx) = pair(kernel_size, "kernel_size"), pair(stride, "stride")
    py, px = pair(padding, "padding")
    # BEGIN EXERCISE 5.1
    h_out, w_out = output_size(h, ky, sy, py), output_size(w, kx, sx, px)
    c_group = c_in // groups
    work = n * out_channels * h_out * w_out * c_group * ky * kx
    depth = tree_depth(c_group) + tree_depth(ky) + tree_depth(kx)
    return work, depth
    # END EXERCISE 5.1


def linear_work_depth(x_shape, out_features):
    """(W, D) of a fully connected layer on an input whose last axis holds C_in features."""
    *rows, c_in = x_shape
    return math.prod(rows) * c_in * out_features, tree_depth(c_in)


def pool2d_work_depth(x_shape, kernel_size, stride=None, padding=0, mode="max"):
    """(W, D) of max or average pooling (``mode``); the stride defaults to the window size."""
    op = "pool2d_work_depth"
    if mode not in ("max", "avg"):
        raise ValueError(f"{op}: mode must be 'max' or 'avg', not {mode!r}")
    n, c, h, w = x_shape
    (ky, kx), (py, px) = pair(kernel_size, "kernel_size", op), pair(padding, "padding", op)
    sy, sx = (ky, kx) if stride is None else pair(stride, "stride", op)
    outputs = n * c * output_size(h, ky, sy, py) * output_size(w, kx, sx, px)
    per_output = ky * kx - 1 if mode == "max" else ky * kx
    return outputs * per_output, tree_depth(ky) + tree_depth(kx)


def activation_work_depth(x_shape):
    """(W, D) of an elementwise activation (ReLU, tanh, sigmoid): one operation per value."""
    return math.prod(x_shape), 1


def chain_work_depth(costs):
    """(W, D) of layers run one after the other: the works add, and so do the depths."""
    return sum(w for w, _ in costs), sum(d for _, d in costs)
