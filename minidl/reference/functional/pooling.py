"""2-D max and average pooling of NCHW arrays, one output position at a time.

With kernel (KH, KW), stride (SH, SW) and padding (PH, PW), the output has
OH = floor((H + 2 PH - KH) / SH) + 1 rows (likewise columns), and output
(i, j) looks at the window xpad[:, :, i SH : i SH + KH, j SW : j SW + KW] of
the padded input:

    max:      y[n, c, i, j] = max over the window
              dx: dy[n, c, i, j] goes to the window's maximum
    average:  y[n, c, i, j] = (1 / (KH KW)) sum over the window
              dx: every element of the window gets dy[n, c, i, j] / (KH KW)

Windows may overlap (stride < kernel), so an input element collects the
gradients of every window that contains it. Max pooling pads with -inf (the
padding is never the maximum) and, when a window holds several equal
maxima, sends the whole gradient to the first one in row-major order, as
PyTorch and ``minidl.functional.max_pool2d`` do. Average pooling pads with
zeros and counts them in the average. (Ben-Nun & Hoefler 2019, Demystifying
Parallel and Distributed Deep Learning, §3.1.1 and App. A.5.)

An exercise region here must not call minidl's autograd (``Tensor.backward`` of the tuned
ops): the check fails one that does, since the exercise is to write the algorithm out.
"""

from ...backend import get_array_module
from ...functional.pooling import pad_hw, pool_geometry


def window(a, i, j, geometry):
    """The view of the (padded) array ``a`` that output position (i, j) pools over."""
    (kh, kw), (sh, sw) = geometry[:2]
    return a[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]


def unpad(a, geometry, shape):
    """The part of the padded array ``a`` that covers the input of ``shape``."""
    (ph, pw) = geometry[2]
    return a[:, :, ph : ph + shape[2], pw : pw + shape[3]]


def max_pool_forward(x, kernel_size, stride=None, padding=0):
    """Maximum of each window (stride defaults to the kernel); the cache is (padded x, geometry)."""
    xp = get_array_module(x)
    geometry = pool_geometry(x.shape, kernel_size, stride, padding, "max_pool_forward")
    (oh, ow) = geometry[3]
    xpad = pad_hw(x, geometry[2], -xp.inf)
    y = xp.empty(x.shape[:2] + (oh, ow), dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            y[:, :, i, j] = window(xpad, i, j, geometry).max(axis=(2, 3))
    return y, (xpad, x.shape, geometry)


def max_pool_backward(dout, cache):
    """dx: each output's gradient added to the first maximum of its window."""
    xpad, shape, geometry = cache
    xp = get_array_module(xpad)
    (kh, kw), (sh, sw), _, (oh, ow) = geometry
    n, c = shape[:2]
    # BEGIN EXERCISE 2.3
    dxpad = xp.zeros_like(xpad)
    batch, channel = xp.meshgrid(xp.arange(n), xp.arange(c), indexing="ij")
    for i in range(oh):
        for j in range(ow):
            first = window(xpad, i, j, geometry).reshape(n, c, kh * kw).argmax(axis=2)
            rows, cols = i * sh + first // kw, j * sw + first % kw
            dxpad[batch, channel, rows, cols] += dout[:, :, i, j]
    return unpad(dxpad, geometry, shape)
    # END EXERCISE 2.3


def avg_pool_forward(x, kernel_size, stride=None, padding=0):
    """Mean of each window, zero padding included; the cache is (input shape, geometry)."""
    xp = get_array_module(x)
    geometry = pool_geometry(x.shape, kernel_size, stride, padding, "avg_pool_forward")
    (oh, ow) = geometry[3]
    xpad = pad_hw(x, geometry[2], 0)
    y = xp.empty(x.shape[:2] + (oh, ow), dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            y[:, :, i, j] = window(xpad, i, j, geometry).mean(axis=(2, 3))
    return y, (x.shape, geometry)


def avg_pool_backward(dout, cache):
    """dx: each output's gradient shared equally by the KH KW elements of its window."""
    shape, geometry = cache
    xp = get_array_module(dout)
    (kh, kw), _, (ph, pw), (oh, ow) = geometry
    dxpad = xp.zeros((shape[0], shape[1], shape[2] + 2 * ph, shape[3] + 2 * pw), dtype=dout.dtype)
    for i in range(oh):
        for j in range(ow):
            window(dxpad, i, j, geometry)[...] += dout[:, :, i, j, None, None] / (kh * kw)
    return unpad(dxpad, geometry, shape)
