"""Convolution and pooling on a block of image rows: halo exchange, then the serial op.

A spatial layer owns the output rows ``split_rows(O, P)[rank]`` of its serial
layer. It fetches the input rows those outputs read (``HaloExchange``,
padding rows included), then runs the serial op with no padding along the
height, so every output row is computed from the same inputs and weights as
in the serial layer (Ben-Nun & Hoefler 2019, §5.3, spatial partitioning with
halo exchange). A convolution's weight and bias are the serial layer's own
Parameters, passed through ``SumOverGroup``: each rank's gradient covers its
rows, and backward sums it over the group, so after ``backward()`` every rank
holds the serial gradient.
"""

import math

from minidl import functional as F
from minidl.conv.geometry import output_size, pair
from minidl.dist.spatial.exchange import HaloExchange, SumOverGroup
from minidl.layers import MaxPool2d, Module
from minidl.perf.halo_cost import needed_rows, split_rows


class _RowWindow(Module):
    """The rows of one window layer (kernel, stride, padding, dilation along the height)."""

    def _plan(self, comm, height, kernel, stride, padding, dilation, counters):
        self.comm, self.counters, self.height = comm, counters, height
        self.rows = split_rows(height, comm.size)
        self.needs = needed_rows(height, kernel, stride, padding, dilation, comm.size)
        self.out_height = output_size(height, kernel, stride, padding, dilation)

    def _halo(self, x, pad_value):
        return HaloExchange.apply(
            x,
            comm=self.comm,
            needs=self.needs,
            rows=self.rows,
            pad_value=pad_value,
            counters=self.counters,
        )


class SpatialConv2d(_RowWindow):
    """``conv`` (an ``L.Conv2d``) on this rank's rows of a ``height``-row input."""

    def __init__(self, conv, comm, height, counters):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.stride, self.dilation, self.groups, self.algo = (
            conv.stride,
            conv.dilation,
            conv.groups,
            conv.algo,
        )
        self.padding = (0, conv.padding[1])
        kernel = conv.kernel_size[0]
        self._plan(
            comm, height, kernel, conv.stride[0], conv.padding[0], conv.dilation[0], counters
        )
        self._label = f"Spatial{conv._label}"

    def forward(self, x):
        weight = SumOverGroup.apply(self.weight, comm=self.comm, counters=self.counters)
        bias = self.bias
        if bias is not None:
            bias = SumOverGroup.apply(bias, comm=self.comm, counters=self.counters)
        return F.conv2d(
            self._halo(x, 0.0),
            weight,
            bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            self.algo,
        )

    def extra_repr(self):
        return f"{self._label}, rows {self.rows[self.comm.rank]} of {self.height}"


class SpatialPool2d(_RowWindow):
    """``pool`` (an ``L.MaxPool2d`` or ``L.AvgPool2d``) on this rank's rows."""

    def __init__(self, pool, comm, height, counters):
        super().__init__()
        self.kernel_size = pair(pool.kernel_size, "kernel_size", type(pool).__name__)
        self.stride = self.kernel_size if pool.stride is None else pair(pool.stride, "stride")
        padding = pair(pool.padding, "padding")
        self.padding = (0, padding[1])
        self.is_max = isinstance(pool, MaxPool2d)
        self._plan(comm, height, self.kernel_size[0], self.stride[0], padding[0], 1, counters)

    def forward(self, x):
        if self.is_max:
            return F.max_pool2d(
                self._halo(x, -math.inf), self.kernel_size, self.stride, self.padding
            )
        return F.avg_pool2d(self._halo(x, 0.0), self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        kind = "max" if self.is_max else "avg"
        return f"{kind} {self.kernel_size}, rows {self.rows[self.comm.rank]} of {self.height}"
