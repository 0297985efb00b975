"""2-D max and average pooling over NCHW tensors (Ben-Nun & Hoefler 2019, §3.1.1, App. A.5).

Output size per axis: floor((H + 2P - K) / S) + 1 (``conv.geometry.output_size``).
Both ops visit the window by its K_h * K_w offsets: each offset is one
strided view of the (padded) input covering every output position at once,
so the work is K_h * K_w whole-array operations rather than a loop over windows.
Max pooling routes the gradient to the first maximum of each window; average
pooling spreads it evenly (padding counts as zeros in the average).
"""

from ..autograd import Function, ShapeError, Tensor
from ..backend import get_array_module
from ..chunks import by_rows
from ..conv.geometry import output_size, pair, window_slices


def pool_geometry(shape, kernel_size, stride, padding, op):
    """Validated (kernel, stride, padding, output size) pairs for an NCHW input."""
    if len(shape) != 4:
        raise ShapeError(f"{op}: expected an NCHW input (4 dimensions), got shape {shape}")
    k = pair(kernel_size, "kernel_size", op)
    s = k if stride is None else pair(stride, "stride", op)
    p = pair(padding, "padding", op)
    if min(k) < 1 or min(s) < 1 or min(p) < 0:
        raise ValueError(f"{op}: kernel {k} and stride {s} must be positive, padding {p} >= 0")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"{op}: padding {p} must be at most half the kernel {k}")
    out = tuple(output_size(shape[2 + i], k[i], s[i], p[i]) for i in range(2))
    if min(out) < 1:
        raise ShapeError(f"{op}: input {shape[2:]} with padding {p} is smaller than the kernel {k}")
    return k, s, p, out


def window(a, i, j, s, out):
    """The strided view of ``a`` seen by kernel offset (i, j) at every output position."""
    return a[(slice(None), slice(None)) + window_slices((i, j), s, (1, 1), out)]


def pad_hw(x, p, value):
    if p == (0, 0):
        return x
    xp = get_array_module(x)
    return xp.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=value)


def same_layout(a, like):
    """``a`` in the memory layout of ``like`` (itself when they already match).

    Elementwise work on arrays whose strides disagree runs several times
    slower than on matching ones; one copy of the (pooled, small) gradient
    is cheaper.
    """
    if a.strides == like.strides or a.size != like.size:
        return a
    out = get_array_module(a).empty_like(like, dtype=a.dtype)
    out[...] = a
    return out


def scatter_windows(fn, g, aux, part):
    """The input gradient: ``part(g_rows, aux_rows, offset)`` summed into each offset's
    window, padding cropped; images in pieces on threads when large (``chunks.by_rows``)."""
    xp = get_array_module(g)
    k, s, p, out = fn.geometry
    if p == (0, 0):  # the input's memory layout: the adds then run along matching strides
        gpad = xp.zeros_like(fn.x, dtype=g.dtype)
    else:
        gpad = xp.zeros(fn.padded_shape, dtype=g.dtype)

    def scatter(g_rows, aux_rows, gpad_rows):
        for offset in range(k[0] * k[1]):
            window(gpad_rows, offset // k[1], offset % k[1], s, out)[...] += part(
                g_rows, aux_rows, offset
            )

    by_rows(scatter, g, aux, gpad)
    h, w = fn.x.shape[2:]
    return gpad[:, :, p[0] : p[0] + h, p[1] : p[1] + w]


class MaxPool2d(Function):
    """Keeps, per output, the offset of the first maximum of its window (``arg``).

    ``arg`` counts the leading offsets whose value is not the maximum, built
    with whole-array comparisons (a masked assignment per offset is ~5x slower).
    Images run in pieces on threads when large (``chunks.by_rows``).
    """

    def forward(self, x, kernel_size, stride, padding):
        xp = get_array_module(x)
        k, s, p, out = pool_geometry(x.shape, kernel_size, stride, padding, "max_pool2d")
        shape = (*x.shape[:2], *out)  # y and arg in the input's memory layout (layout note)
        y = xp.empty_like(x, shape=shape)
        arg = xp.empty_like(x, dtype=xp.uint8, shape=shape)

        def pool(x_rows, y_rows, arg_rows):
            xpad = pad_hw(x_rows, p, -xp.inf)
            views = [window(xpad, o // k[1], o % k[1], s, out) for o in range(k[0] * k[1])]
            y_rows[...] = views[0]
            for view in views[1:]:
                xp.maximum(y_rows, view, out=y_rows)
            arg_rows[...] = 0
            before_max = xp.ones_like(y_rows, dtype=bool)
            for view in views[:-1]:
                xp.logical_and(before_max, view != y_rows, out=before_max)
                arg_rows += before_max

        by_rows(pool, x, y, arg)
        self.geometry, self.arg, self.x = (k, s, p, out), arg, x
        self.padded_shape = (*x.shape[:2], x.shape[2] + 2 * p[0], x.shape[3] + 2 * p[1])
        return y

    def backward(self, g):
        k, s, p, out = self.geometry
        g = same_layout(g, self.arg)
        tiles = (
            s == k
            and p == (0, 0)
            and self.x.shape[2] == k[0] * out[0]
            and self.x.shape[3] == k[1] * out[1]
        )
        if not tiles:
            return scatter_windows(self, g, self.arg, lambda g_rows, arg, o: g_rows * (arg == o))
        # Non-overlapping windows that tile the input: each input element is in exactly
        # one window, so each offset's view is written once, without accumulation.
        xp = get_array_module(g)
        gx = xp.empty_like(self.x, dtype=g.dtype)

        def route(g_rows, arg_rows, gx_rows):
            for offset in range(k[0] * k[1]):
                view = window(gx_rows, offset // k[1], offset % k[1], s, out)
                xp.multiply(g_rows, arg_rows == offset, out=view)

        by_rows(route, g, self.arg, gx)
        return gx


class AvgPool2d(Function):
    def forward(self, x, kernel_size, stride, padding):
        k, s, p, out = pool_geometry(x.shape, kernel_size, stride, padding, "avg_pool2d")
        xpad = pad_hw(x, p, 0)
        y = window(xpad, 0, 0, s, out).copy()
        for offset in range(1, k[0] * k[1]):
            y += window(xpad, offset // k[1], offset % k[1], s, out)
        y *= 1.0 / (k[0] * k[1])
        self.geometry, self.padded_shape, self.x = (k, s, p, out), xpad.shape, x
        return y

    def backward(self, g):
        k = self.geometry[0]
        share = g * (1.0 / (k[0] * k[1]))
        return scatter_windows(self, g, share, lambda g_rows, share_rows, offset: share_rows)


def max_pool2d(
    x: Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
) -> Tensor:
    """Maximum over each window (stride defaults to the kernel size; pads with -inf)."""
    return MaxPool2d.apply(x, kernel_size=kernel_size, stride=stride, padding=padding)


def avg_pool2d(
    x: Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
) -> Tensor:
    """Mean over each window (stride defaults to the kernel size; zero padding counted)."""
    return AvgPool2d.apply(x, kernel_size=kernel_size, stride=stride, padding=padding)
