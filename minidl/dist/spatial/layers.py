"""Convolution and pooling on a block of an image: halo exchange, then the serial op.

The ranks of a spatial group split every image into R x C blocks (``Blocks``):
R blocks of rows, and C of columns (C = 1: a split over the height only). A
spatial layer owns the outputs ``split_rows(O_h, R)[i]`` x ``split_rows(O_w,
C)[j]`` of its serial layer. It fetches the input rows those outputs read from
the ranks above and below (``HaloExchange``, padding rows included), then the
columns, of the row-extended block, from the ranks left and right, which brings
the corners along; then it runs the serial op with no padding along the split
axes, so every output is computed from the same inputs and weights as in the
serial layer (Ben-Nun & Hoefler 2019, §5.3, spatial partitioning with halo
exchange). A convolution's weight and bias are the serial layer's own
Parameters, passed through ``SumOverGroup``: each rank's gradient covers its
block, and backward sums it over the group, so after ``backward()`` every rank
holds the serial gradient.
"""

import math

from minidl import functional as F
from minidl import layers as L
from minidl.conv.geometry import pair
from minidl.dist.spatial.exchange import HaloExchange, SumOverGroup
from minidl.perf.halo_cost import SplitError, needed_rows, split_rows


def window_args(layer, axis=0):
    """(kernel, stride, padding, dilation) of a window layer along the height (``axis`` 0)
    or the width (1); None for other layers."""
    if isinstance(layer, L.Conv2d):
        return tuple(
            v[axis] for v in (layer.kernel_size, layer.stride, layer.padding, layer.dilation)
        )
    if isinstance(layer, (L.MaxPool2d, L.AvgPool2d)):
        kernel = pair(layer.kernel_size, "kernel_size")[axis]
        stride = kernel if layer.stride is None else pair(layer.stride, "stride")[axis]
        return kernel, stride, pair(layer.padding, "padding")[axis], 1
    return None


def check_cols(size, cols):
    """Refuse a number of column blocks that does not divide the group's ``size`` ranks."""
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1 or size % cols:
        raise SplitError(
            f"cols={cols!r} must be a whole number that divides the spatial group's "
            f"{size} ranks (e.g. cols=1: rows only)"
        )


class Blocks:
    """A group's ranks as ``rows`` x ``cols`` blocks of an image (collective over ``group``).

    Rank ``i * cols + j`` holds row block i and column block j. ``down`` is the
    communicator of the ranks of column block j (ordered by i), ``across`` that of
    row block i (None when ``cols`` is 1); ``group`` (a duplicate) sums gradients.
    """

    def __init__(self, group, cols=1):
        check_cols(group.size, cols)
        self.rows, self.cols = group.size // cols, cols
        self.i, self.j = divmod(group.rank, cols)
        self.group = group.dup()
        if cols == 1:
            self.down, self.across = group.dup(), None
        else:
            self.down = group.split(self.j, self.i)
            self.across = group.split(self.i, self.j)

    def splits(self):
        """[(axis, communicator, parts)] of the split axes, height first."""
        return [(2, self.down, self.rows)] + ([(3, self.across, self.cols)] if self.across else [])


class _Window(L.Module):
    """A window layer's plan along each split axis and its halo exchanges."""

    def _plan(self, layer, blocks, shape, counters):
        self.blocks, self.counters, self.shape = blocks, counters, shape
        self.padding = [window_args(layer, 0)[2], window_args(layer, 1)[2]]
        self.exchanges = []
        for axis, comm, parts in blocks.splits():
            extent, args = shape[axis - 2], window_args(layer, axis - 2)
            self.padding[axis - 2] = 0
            rows = split_rows(extent, parts)
            self.exchanges.append((axis, comm, needed_rows(extent, *args, parts=parts), rows))
        self.padding = tuple(self.padding)

    def _halo(self, x, pad_value):
        for axis, comm, needs, rows in self.exchanges:
            x = HaloExchange.apply(
                x,
                comm=comm,
                needs=needs,
                rows=rows,
                pad_value=pad_value,
                counters=self.counters,
                axis=axis,
            )
        return x

    def extra_repr(self):
        return f"{self._label}, block ({self.blocks.i}, {self.blocks.j}) of {self.shape}"


class SpatialConv2d(_Window):
    """``conv`` (an ``L.Conv2d``) on this rank's block of a (height, width) input."""

    def __init__(self, conv, blocks, shape, counters):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.stride, self.dilation = conv.stride, conv.dilation
        self.groups, self.algo = conv.groups, conv.algo
        self._plan(conv, blocks, shape, counters)
        self._label = f"Spatial{conv._label}"

    def forward(self, x):
        group = self.blocks.group
        weight = SumOverGroup.apply(self.weight, comm=group, counters=self.counters)
        bias = self.bias
        if bias is not None:
            bias = SumOverGroup.apply(bias, comm=group, counters=self.counters)
        x = self._halo(x, 0.0)
        return F.conv2d(
            x, weight, bias, self.stride, self.padding, self.dilation, self.groups, self.algo
        )


class SpatialPool2d(_Window):
    """``pool`` (an ``L.MaxPool2d`` or ``L.AvgPool2d``) on this rank's block."""

    def __init__(self, pool, blocks, shape, counters):
        super().__init__()
        self.kernel_size = pair(pool.kernel_size, "kernel_size", type(pool).__name__)
        self.stride = self.kernel_size if pool.stride is None else pair(pool.stride, "stride")
        self.is_max = isinstance(pool, L.MaxPool2d)
        self._plan(pool, blocks, shape, counters)
        self._label = repr(pool)

    def forward(self, x):
        if self.is_max:
            return F.max_pool2d(
                self._halo(x, -math.inf), self.kernel_size, self.stride, self.padding
            )
        return F.avg_pool2d(self._halo(x, 0.0), self.kernel_size, self.stride, self.padding)
