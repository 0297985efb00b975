"""Direct convolution: the definition, vectorised over batch and channels.

Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep Learning,
Eq. 2 / Alg. 3: y[n, k, i, j] = sum_{c, u, v} xpad[n, c, i*sh + u*dh, j*sw + v*dw] * w[k, c, u, v],
one GEMM ``w[:, :, u, v] (K x C) @ x_shifted (C x N*OH*OW)`` per kernel offset (u, v).
The forward pass is the exercise (``algo="direct_reference"``); the gradients,
helpers and costs are those of ``minidl/conv/direct.py`` (``algo="direct"``).

An exercise region here must not call the tuned convolutions (``minidl.conv``,
``minidl.functional.conv``): the check fails one that does, since the exercise is to write
the algorithm out.
"""

from ...backend import get_array_module
from ...conv.direct import Direct, batch_first, padded_channels_first, shifted


class DirectReference(Direct):
    """The definition for every stride, padding and dilation; its forward is exercise 3.3."""

    name = "direct_reference"

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        xpad = padded_channels_first(x, geom)
        # BEGIN EXERCISE 3.3
        y = xp.zeros((geom.out_channels, geom.batch * geom.out_h * geom.out_w), dtype=x.dtype)
        for u in range(geom.kernel_h):
            for v in range(geom.kernel_w):
                y += w[:, :, u, v] @ shifted(xpad, geom, u, v)
        return batch_first(y, geom.out_h, geom.out_w), None
        # END EXERCISE 3.3


DIRECT_REFERENCE = DirectReference()
