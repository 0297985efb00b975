"""Spatial parallelism: window layers on a block of an image, and the model split into them.

A spatial group splits every image into R x C blocks (``Blocks``; C = 1: rows only). A
spatial layer owns the outputs ``split_rows(O_h, R)[i]`` x ``split_rows(O_w, C)[j]`` of
its serial layer. It fetches the input rows they read from the ranks above and below
(``HaloExchange``, padding included), then the columns of that row-extended block from
the ranks left and right (corners come along), and runs the serial op without padding
along the split axes: every output from the serial layer's inputs and weights (Ben-Nun &
Hoefler 2019, §5.3, spatial partitioning with halo exchange). Weight and bias are the
serial Parameters through ``SumOverGroup``, so after ``backward()`` every rank holds the
serial gradient.

``spatial_parallel`` turns each leading ``Conv2d``, ``MaxPool2d`` and ``AvgPool2d`` into
its spatial form; the pointwise layers between them (``POINTWISE``: they mix channels,
never pixels) run on the block as they are. At the first other layer the blocks are
gathered (rows, then columns) and the tail runs replicated. A ``BatchNorm2d`` before the
tail normalises its block with the statistics of every block of the batch (``statistics``,
the spatial group by default: ``F.batch_norm``'s group joins the blocks' counts, means and
M2 as it joins replicas'); ``Dropout`` (a mask per process) is refused there. Parameters
keep their serial names, so ``state_dict`` is the serial model's.
"""

import math

from minidl import functional as F
from minidl import layers as L
from minidl.conv.geometry import output_size, pair
from minidl.dist.spatial.exchange import GatherRows, HaloExchange, SumOverGroup
from minidl.perf.halo_cost import SplitError, halo_bytes, needed_rows, split_rows
from minidl.perf.telemetry import RankCounters


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
    """A group's ranks as ``rows`` x ``cols`` blocks of an image (collective over ``group``):
    rank ``i * cols + j`` holds row block i and column block j. ``down``: the ranks of column
    block j (by i); ``across``: those of row block i (None when ``cols`` is 1); ``group``
    (a duplicate) sums gradients."""

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


class SpatialBatchNorm2d(L.BatchNorm2d):
    """``bn`` (an ``L.BatchNorm2d``, its Parameters and buffers) on this rank's block: the
    training statistics of every block of the batch (``statistics``, its ``group``), gamma
    and beta through ``SumOverGroup`` over the blocks, so every rank holds their serial
    gradient (each block's is a sum over its own pixels)."""

    def __init__(self, bn, blocks, statistics, counters):
        affine, tracked = bn.weight is not None, bn.running_mean is not None
        super().__init__(bn.num_features, bn.eps, bn.momentum, affine, tracked, group=statistics)
        for name, value in [*bn._parameters.items(), *bn._buffers.items()]:
            setattr(self, name, value)
        self.blocks, self.counters, self.training = blocks, counters, bn.training

    def affine(self):
        if self.weight is None:
            return None, None
        group, counters = self.blocks.group, self.counters
        return tuple(
            SumOverGroup.apply(p, comm=group, counters=counters) for p in (self.weight, self.bias)
        )


# ---- the split model ------------------------------------------------------------------------
POINTWISE = (L.ReLU, L.Tanh, L.Sigmoid, L.LocalResponseNorm, L.BatchNorm2d)
REFUSED = (L.Dropout,)
AXES = ("height", "width")


def _walk(model, extent, parts, axis):
    """[(name, input extent)] of the window layers along ``axis`` (0: height, 1: width), the
    index of the first tail layer, and the extent the tail gets."""
    windows = []
    for index, (name, layer) in enumerate(model._modules.items()):
        args = window_args(layer, axis)
        if args is not None:
            try:
                needed_rows(extent, *args, parts=parts)
            except SplitError as error:
                raise SplitError(
                    f"layer {name} ({layer!r}) at {AXES[axis]} {extent}: {error}"
                ) from None
            windows.append((name, extent))
            extent = output_size(extent, *args)
        elif isinstance(layer, REFUSED):
            raise SplitError(
                f"layer {name} ({layer!r}) cannot run on a block of an image: its mask would "
                "be drawn per block; put it after the Flatten, or use a grid without spatial"
            )
        elif not isinstance(layer, POINTWISE):
            return windows, index, extent
    return windows, len(model._modules), extent


def plan_rows(model, height, parts, axis=0):
    """``_walk``'s plan of a split of the height (``axis`` 1: the width) into ``parts``, or a
    one-line ``SplitError`` naming the layer and the most parts that would fit."""
    if not isinstance(model, L.Sequential):
        raise SplitError(
            f"spatial parallelism splits an L.Sequential, not a {type(model).__name__}; "
            "build the model as one Sequential of layers"
        )
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise SplitError(f"spatial={parts!r}: give a whole number of ranks >= 1")
    try:
        return _walk(model, height, parts, axis)
    except SplitError as error:
        fit = next((p for p in range(parts - 1, 1, -1) if _fits(model, height, p, axis)), 1)
        taller = next((h for h in range(height + 1, 8 * height) if _fits(model, h, parts, axis)), 0)
        raise SplitError(
            f"cannot split this model's {AXES[axis]} {height} into {parts} blocks: {error}; "
            + (f"a {AXES[axis]} of {taller} would split into {parts}; " if taller else "")
            + (f"{fit} blocks would fit" if fit > 1 else "only the whole image (1 block) fits")
        ) from None


def _fits(model, extent, parts, axis):
    try:
        _walk(model, extent, parts, axis)
    except SplitError:
        return False
    return True


def step_bytes(model, shape, parts, itemsize=4, cols=1, input_grad=False):
    """Bytes a training step of ``model`` on an (N, C, H, W) batch sends, summed over the
    ``parts`` ranks of a split into parts/cols x cols blocks (what ``SpatialParallel.counters``
    counts):

    - ``halo_bytes``: ``halo_cost.halo_bytes`` of each window layer (forward, and backward
      for every layer but the first unless ``input_grad``): rows over the whole width,
      then (cols > 1) columns over the rows each block row reads, sum over i of (hi_i - lo_i);
    - ``gather_bytes``: each rank's block of the tail's (H', W') input, padded to the longest,
      to the others of its column, then its rows to the others of its row:
      R (R - 1) N C ceil(H'/R) W' + P (C - 1) N C H' ceil(W'/C);
    - ``grad_bytes``: the window layers' weights and biases, allreduced by every rank.
    """
    check_cols(parts, cols)
    rows = parts // cols
    windows, _, tail_h = plan_rows(model, shape[2], rows)
    _, _, tail_w = plan_rows(model, shape[3], cols, axis=1)
    layers = model._modules
    n, channels, width = shape[0], shape[1], shape[3]
    halo = 0
    for index, (name, height) in enumerate(windows):
        layer, grad = layers[name], index > 0 or input_grad
        along_h, along_w = window_args(layer, 0), window_args(layer, 1)
        halo += halo_bytes((n, channels, height, width), *along_h, rows, itemsize, grad)
        if cols > 1:
            read = sum(hi - lo for lo, hi in needed_rows(height, *along_h, parts=rows))
            halo += halo_bytes((n, channels, width, read), *along_w, cols, itemsize, grad)
        channels = layer.out_channels if isinstance(layer, L.Conv2d) else channels
        width = output_size(width, *along_w)
    longest_h = max(b - a for a, b in split_rows(tail_h, rows))
    longest_w = max(b - a for a, b in split_rows(tail_w, cols))
    weights = sum(p.data.size for name, _ in windows for p in layers[name].parameters())
    gathered = rows * (rows - 1) * longest_h * tail_w + parts * (cols - 1) * tail_h * longest_w
    return {
        "halo_bytes": halo,
        "gather_bytes": n * channels * itemsize * gathered,
        "grad_bytes": parts * weights * itemsize if parts > 1 else 0,  # one rank sums nothing
    }


def local_rows(x, group, cols=1):
    """This rank's block of an (N, C, H, W) batch: its rows (and with ``cols`` > 1 its
    columns, rank ``i * cols + j`` holding row block i and column block j), a C-contiguous copy."""
    rows = group.size // cols
    (a, b), (c, d) = (
        split_rows(x.shape[2], rows)[group.rank // cols],
        split_rows(x.shape[3], cols)[group.rank % cols],
    )
    return x[:, :, a:b, c:d].copy()


class SpatialParallel(L.Sequential):
    """``model`` with its leading window layers split over ``group``'s ranks by image blocks.
    ``forward`` takes this rank's block of a ``height`` x ``width`` batch (``local_rows``,
    same ``cols``; ``cols`` > 1 needs ``width``) and returns, on every rank, what the serial
    model returns for the whole batch. ``counters``: the bytes and halo messages sent.
    ``statistics``: the ranks whose blocks make the batch a ``BatchNorm2d`` before the tail
    normalises (default ``group``; with replicas that join theirs, replicas x blocks)."""

    def __init__(self, model, group, height, width=None, cols=1, statistics=None):
        check_cols(group.size, cols)
        windows, gather_at, tail_h = plan_rows(model, height, group.size // cols)
        tail_w, widths = None, {}
        if cols != 1:
            if width is None:
                raise SplitError(f"cols={cols} splits the width: pass width= (the image's)")
            col_windows, _, tail_w = plan_rows(model, width, cols, axis=1)
            widths = dict(col_windows)
        blocks = Blocks(group, cols)
        super().__init__()
        self.counters = RankCounters()
        heights = dict(windows)
        for index, (name, layer) in enumerate(model._modules.items()):
            if name in heights:
                kind = SpatialConv2d if isinstance(layer, L.Conv2d) else SpatialPool2d
                shape = (heights[name], widths.get(name))
                layer = kind(layer, blocks, shape, self.counters)
            elif isinstance(layer, L.BatchNorm2d) and index < gather_at:
                layer = SpatialBatchNorm2d(layer, blocks, statistics or group, self.counters)
            setattr(self, name, layer)
        self._gather_at = gather_at
        self._gathers = [(2, blocks.down, split_rows(tail_h, blocks.rows))]
        if blocks.across is not None:
            self._gathers.append((3, blocks.across, split_rows(tail_w, cols)))
        self.height, self.width = height, width

    def forward(self, x):
        for index, layer in enumerate(self._modules.values()):
            if index == self._gather_at:
                x = self.gather(x)
            x = layer(x)
        return self.gather(x) if self._gather_at == len(self._modules) else x

    def gather(self, x):
        """The whole activation on every rank from each rank's block."""
        for axis, comm, rows in self._gathers:
            x = GatherRows.apply(x, comm=comm, rows=rows, counters=self.counters, axis=axis)
        return x


def spatial_parallel(model, group, height, width=None, cols=1, statistics=None):
    """``SpatialParallel(model, group, height, width, cols, statistics)`` (collective over
    ``group``)."""
    return SpatialParallel(model, group, height, width, cols, statistics)
