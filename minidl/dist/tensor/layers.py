"""Tensor-parallel layers: one layer's weights split over the ranks of a group.

Each is built from the serial layer it replaces and holds this rank's block (``Split``;
uneven sizes allowed) under the serial parameter names; ``split`` names the axis each
parameter is split along (None: replicated).

Megatron-LM's pair (Shoeybi et al. 2019, section 3): a column-parallel ``Linear``
(outputs split, Y_r = X W_r^T), then a row-parallel one (inputs split,
Y = sum_r X_r W_r^T), costs one allreduce forward and one backward. The filter- and
input-channel-parallel ``Conv2d`` are the same pair over channels; the group-parallel
``Conv2d`` runs one group of a grouped convolution per rank (Krizhevsky et al. 2012).
"""

from ... import functional as F
from ...layers import Module, Parameter
from .functions import (
    Split,
    copy_to_group,
    gather_blocks,
    gather_from_group,
    reduce_from_group,
    split_to_group,
    take_block,
)


class ShardedModule(Module):
    """A layer whose parameters are blocks of a serial layer's (``split``: name -> axis)."""

    split: dict = {}

    def _shard(self, serial, comm, what, width):
        """Keep ``comm`` and this rank's blocks of ``serial``'s parameters, ``width`` ``what``
        split over the ranks (each needs at least one)."""
        if width < comm.size:
            raise ValueError(
                f"{type(self).__name__}({serial.extra_repr()}): {width} {what} cannot be split "
                f"over {comm.size} ranks (each needs at least one); use a tensor-parallel group "
                f"of at most {width} ranks"
            )
        self.comm = comm
        for name, axis in self.split.items():
            full = getattr(serial, name)
            if full is None:
                setattr(self, name, None)
            else:
                data = full.data.copy() if axis is None else self.block(full.data, axis)
                setattr(self, name, Parameter(data))

    def block(self, array, axis):
        """This rank's block of a whole (serial-shaped) ``array`` along ``axis``."""
        return take_block(array, axis, self.comm.rank, self.comm.size)

    def whole(self, array, axis, n):
        """The serial-shaped array of every rank's block ``array`` (collective)."""
        return gather_blocks(self.comm, array, axis, n)


def _here(width, comm):
    """``width`` and the size of this rank's block of it, for ``extra_repr``."""
    return f"{width} ({Split(width, comm.size).sizes[comm.rank]} here)"


def _conv_options(layer, conv, groups):
    """``conv``'s stride, padding, dilation and algorithm, once its groups are checked."""
    if conv.groups != groups:
        raise ValueError(
            f"{type(layer).__name__}({conv.extra_repr()}): {type(layer).__name__} needs "
            f"groups={groups}; a grouped convolution goes one group per rank "
            "(GroupParallelConv2d on as many ranks as groups), or stays replicated"
        )
    return {
        "stride": conv.stride,
        "padding": conv.padding,
        "dilation": conv.dilation,
        "algo": conv.algo,
    }


class ColumnParallelLinear(ShardedModule):
    """``Linear`` with its outputs split: rank r computes y[:, block r] = x W_r^T + b_r.
    ``gather_output``: all-gather the blocks into the replicated y (else each rank keeps
    its block, for a ``RowParallelLinear``)."""

    split = {"weight": 0, "bias": 0}

    def __init__(self, linear, comm, gather_output=False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.gather_output = gather_output
        self._shard(linear, comm, "outputs", linear.out_features)

    def forward(self, x):
        y = F.linear(copy_to_group(x, self.comm), self.weight, self.bias)
        if self.gather_output:
            y = gather_from_group(y, self.comm, -1, self.out_features)
        return y

    def extra_repr(self):
        outputs = _here(self.out_features, self.comm)
        return f"{self.in_features}, {outputs}, gather={self.gather_output}"


class RowParallelLinear(ShardedModule):
    """``Linear`` with its inputs split: y = sum_r x[:, block r] W_r^T + b (one allreduce).
    ``input_is_parallel``: x is already this rank's block of features (a
    ``ColumnParallelLinear``'s output); else the replicated x is split here."""

    split = {"weight": 1, "bias": None}

    def __init__(self, linear, comm, input_is_parallel=True):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.input_is_parallel = input_is_parallel
        self._shard(linear, comm, "inputs", linear.in_features)

    def forward(self, x):
        if not self.input_is_parallel:
            x = split_to_group(x, self.comm, -1)
        y = reduce_from_group(F.linear(x, self.weight), self.comm)
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return f"{_here(self.in_features, self.comm)}, {self.out_features}"


class FilterParallelConv2d(ShardedModule):
    """``Conv2d`` with its filters (output channels) split; the input is replicated.
    ``gather_output`` as for ``ColumnParallelLinear``."""

    split = {"weight": 0, "bias": 0}

    def __init__(self, conv, comm, gather_output=False):
        super().__init__()
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.options = _conv_options(self, conv, groups=1)
        self.gather_output = gather_output
        self._shard(conv, comm, "filters", conv.out_channels)

    def forward(self, x):
        y = F.conv2d(copy_to_group(x, self.comm), self.weight, self.bias, **self.options)
        if self.gather_output:
            y = gather_from_group(y, self.comm, 1, self.out_channels)
        return y


class InputChannelParallelConv2d(ShardedModule):
    """``Conv2d`` with its input channels split: y = sum_r conv(x[:, block r], W[:, block r]) + b.
    ``input_is_parallel`` as for ``RowParallelLinear``."""

    split = {"weight": 1, "bias": None}

    def __init__(self, conv, comm, input_is_parallel=True):
        super().__init__()
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.options = _conv_options(self, conv, groups=1)
        self.input_is_parallel = input_is_parallel
        self._shard(conv, comm, "input channels", conv.in_channels)

    def forward(self, x):
        if not self.input_is_parallel:
            x = split_to_group(x, self.comm, 1)
        y = reduce_from_group(F.conv2d(x, self.weight, **self.options), self.comm)
        return y if self.bias is None else y + self.bias.reshape((1, -1, 1, 1))


class GroupParallelConv2d(ShardedModule):
    """A grouped ``Conv2d`` with one group per rank (Krizhevsky et al. 2012's two columns):
    rank g convolves its block of the input channels with group g's filters, no message.
    ``input_is_parallel`` and ``gather_output`` as for the ``Linear`` layers."""

    split = {"weight": 0, "bias": 0}

    def __init__(self, conv, comm, input_is_parallel=True, gather_output=False):
        super().__init__()
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.options = _conv_options(self, conv, groups=comm.size)
        self.input_is_parallel, self.gather_output = input_is_parallel, gather_output
        self._shard(conv, comm, "groups", conv.groups)

    def forward(self, x):
        if not self.input_is_parallel:
            x = split_to_group(x, self.comm, 1)
        y = F.conv2d(x, self.weight, self.bias, **self.options)
        if self.gather_output:
            y = gather_from_group(y, self.comm, 1, self.out_channels)
        return y
