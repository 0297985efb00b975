"""Tensor-parallel layers: one layer's weights split over the ranks of a group.

Each is built from the serial layer it replaces and holds this rank's block of
its weights (``Partition`` of the split dimension; uneven sizes allowed), under
the serial layer's parameter names. ``split`` names the axis each parameter is
split along (None: replicated, every rank the whole of it); ``block`` and
``whole`` turn a serial-shaped array into this rank's block and back.

Megatron-LM's pairing (Shoeybi et al. 2019, section 3): a column-parallel
``Linear`` (outputs split, Y_r = X W_r^T) followed by a row-parallel one
(inputs split, Y = sum_r X_r W_r^T) needs one allreduce forward and one
backward per pair. The filter-parallel and input-channel-parallel ``Conv2d``
are the same pair for convolutions, with channels in place of features
(Ben-Nun & Hoefler 2019, section 5.2: model parallelism).
"""

from ... import functional as F
from ...layers import Module, Parameter
from .functions import copy_to_group, gather_from_group, reduce_from_group, split_to_group
from .partition import Partition, gather_blocks, take_block


def _check_width(layer, what, width, comm):
    if width < comm.size:
        raise ValueError(
            f"{layer}: {width} {what} cannot be split over {comm.size} ranks (each needs at "
            f"least one); use a tensor-parallel group of at most {width} ranks"
        )


class ShardedModule(Module):
    """A layer whose parameters are blocks of a serial layer's (``split``: name -> axis)."""

    split: dict = {}

    def _shard(self, serial, comm):
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


class _SplitsOutput:
    """The forward of a layer whose input is whole and output split along ``output_axis``."""

    def forward(self, x):
        y = self.local(copy_to_group(x, self.comm), self.bias)
        if self.gather_output:
            y = gather_from_group(y, self.comm, self.output_axis, self.split_width)
        return y


class _JoinsInput:
    """The forward of a layer whose input is split along ``input_axis`` and output whole."""

    def forward(self, x):
        if not self.input_is_parallel:
            x = split_to_group(x, self.comm, self.input_axis)
        y = reduce_from_group(self.local(x, None), self.comm)
        return y if self.bias is None else y + self.bias.reshape(self.bias_shape)


class _ParallelLinear(ShardedModule):
    def __init__(self, linear, comm, what, width):
        super().__init__()
        _check_width(f"{type(self).__name__}({linear.extra_repr()})", what, width, comm)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._shard(linear, comm)

    def local(self, x, bias):
        return F.linear(x, self.weight, bias)

    def here(self, width):
        """``width`` and the size of this rank's block of it, for ``extra_repr``."""
        return f"{width} ({Partition(width, self.comm.size).sizes[self.comm.rank]} here)"


class ColumnParallelLinear(_SplitsOutput, _ParallelLinear):
    """``Linear`` with its outputs split: rank r computes y[:, block r] = x W_r^T + b_r.

    ``gather_output``: all-gather the blocks into the replicated y (else each
    rank keeps its block, for a ``RowParallelLinear`` to take as input).
    """

    split = {"weight": 0, "bias": 0}

    output_axis = -1

    def __init__(self, linear, comm, gather_output=False):
        super().__init__(linear, comm, "outputs", linear.out_features)
        self.gather_output, self.split_width = gather_output, linear.out_features

    def extra_repr(self):
        return f"{self.in_features}, {self.here(self.out_features)}, gather={self.gather_output}"


class RowParallelLinear(_JoinsInput, _ParallelLinear):
    """``Linear`` with its inputs split: y = sum_r x[:, block r] W_r^T + b (one allreduce).

    ``input_is_parallel``: x is already this rank's block of features (the
    output of a ``ColumnParallelLinear``); else the replicated x is split here.
    """

    split = {"weight": 1, "bias": None}

    input_axis, bias_shape = -1, (-1,)

    def __init__(self, linear, comm, input_is_parallel=True):
        super().__init__(linear, comm, "inputs", linear.in_features)
        self.input_is_parallel = input_is_parallel

    def extra_repr(self):
        return f"{self.here(self.in_features)}, {self.out_features}"


class _ParallelConv2d(ShardedModule):
    def __init__(self, conv, comm, what, width, groups=1):
        super().__init__()
        name = f"{type(self).__name__}({conv.extra_repr()})"
        if conv.groups != groups:
            raise ValueError(
                f"{name}: {type(self).__name__} needs groups={groups}; a grouped "
                "convolution goes one group per rank (GroupParallelConv2d on as many ranks as "
                "groups), or stays replicated"
            )
        _check_width(name, what, width, comm)
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.stride, self.padding, self.dilation, self.algo = (
            conv.stride, conv.padding, conv.dilation, conv.algo,
        )  # fmt: skip
        self._shard(conv, comm)

    def local(self, x, bias):
        return F.conv2d(
            x, self.weight, bias, stride=self.stride, padding=self.padding,
            dilation=self.dilation, algo=self.algo,
        )  # fmt: skip


class FilterParallelConv2d(_SplitsOutput, _ParallelConv2d):
    """``Conv2d`` with its filters (output channels) split; the input is replicated.

    ``gather_output``: all-gather the channel blocks into the replicated output.
    """

    split = {"weight": 0, "bias": 0}

    output_axis = 1

    def __init__(self, conv, comm, gather_output=False):
        super().__init__(conv, comm, "filters", conv.out_channels)
        self.gather_output, self.split_width = gather_output, conv.out_channels


class InputChannelParallelConv2d(_JoinsInput, _ParallelConv2d):
    """``Conv2d`` with its input channels split: y = sum_r conv(x[:, block r], W[:, block r]) + b.

    ``input_is_parallel``: x is already this rank's block of channels (the
    output of a ``FilterParallelConv2d``); else the replicated x is split here.
    """

    split = {"weight": 1, "bias": None}

    input_axis, bias_shape = 1, (1, -1, 1, 1)

    def __init__(self, conv, comm, input_is_parallel=True):
        super().__init__(conv, comm, "input channels", conv.in_channels)
        self.input_is_parallel = input_is_parallel


class GroupParallelConv2d(_ParallelConv2d):
    """A grouped ``Conv2d`` with one group per rank (Krizhevsky et al. 2012's two columns):
    rank g convolves its block of the input channels with group g's filters, no message.

    ``input_is_parallel``: x is already this rank's block of channels; else the
    replicated x is split here. ``gather_output``: all-gather the output's blocks.
    """

    split = {"weight": 0, "bias": 0}

    def __init__(self, conv, comm, input_is_parallel=True, gather_output=False):
        super().__init__(conv, comm, "groups", conv.groups, groups=comm.size)
        self.input_is_parallel, self.gather_output = input_is_parallel, gather_output

    def forward(self, x):
        if not self.input_is_parallel:
            x = split_to_group(x, self.comm, 1)
        y = self.local(x, self.bias)
        if self.gather_output:
            y = gather_from_group(y, self.comm, 1, self.out_channels)
        return y
