"""A Sequential model split over image rows: ``spatial_parallel(model, group, height)``.

Placement rule: from the first layer on, each ``Conv2d``, ``MaxPool2d`` and
``AvgPool2d`` becomes its spatial form (``layers.py``) and the row-wise layers
between them (``ReLU``, ``Tanh``, ``Sigmoid``, ``LocalResponseNorm``, which
mix channels but never rows) run on the local rows as they are. At the first
other layer (``Flatten``, ``Linear``...) the rows are gathered (``GatherRows``)
and the rest of the model, the tail, runs replicated on every rank of the
group. Layers that need other rows in a way a halo cannot give (``BatchNorm2d``,
whose statistics cover all rows; ``Dropout``, whose mask would differ from
one process's) are refused before the tail.

The model keeps the serial layers' Parameters under their serial names, so its
``state_dict`` is the serial model's (every rank holds all of it). After
``backward()`` every rank holds the serial gradient of every parameter: the
spatial layers sum theirs over the group, the tail computes the whole one.
"""

from minidl import layers as L
from minidl.backend import get_array_module
from minidl.conv.geometry import output_size, pair
from minidl.dist.spatial.exchange import GatherRows
from minidl.dist.spatial.layers import SpatialConv2d, SpatialPool2d
from minidl.dist.telemetry import RankCounters
from minidl.perf.halo_cost import SplitError, halo_bytes, needed_rows, split_rows

ROW_WISE = (L.ReLU, L.Tanh, L.Sigmoid, L.LocalResponseNorm)
REFUSED = (L.BatchNorm2d, L.Dropout)


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


def _walk(model, height, parts):
    """[(name, input height)] of the window layers, the index of the first tail layer,
    and the height the tail gets."""
    windows = []
    for index, (name, layer) in enumerate(model._modules.items()):
        rows = window_args(layer)
        if rows is not None:
            try:
                needed_rows(height, *rows, parts=parts)
            except SplitError as error:
                raise SplitError(f"layer {name} ({layer!r}) at {height} rows: {error}") from None
            windows.append((name, height))
            height = output_size(height, *rows)
        elif isinstance(layer, REFUSED):
            raise SplitError(
                f"layer {name} ({layer!r}) cannot run on a block of rows: it needs every row "
                "at once; put it after the Flatten, or use a grid without spatial"
            )
        elif not isinstance(layer, ROW_WISE):
            return windows, index, height
    return windows, len(model._modules), height


def plan_rows(model, height, parts):
    """``_walk``'s plan; a split that cannot work raises ``SplitError`` in one line that
    names the layer and the most ranks that would fit (what the grid refuses before any work)."""
    if not isinstance(model, L.Sequential):
        raise SplitError(
            f"spatial parallelism splits an L.Sequential, not a {type(model).__name__}; "
            "build the model as one Sequential of layers"
        )
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise SplitError(f"spatial={parts!r}: give a whole number of ranks >= 1")
    try:
        return _walk(model, height, parts)
    except SplitError as error:
        fit = next((p for p in range(parts - 1, 1, -1) if _fits(model, height, p)), 1)
        raise SplitError(
            f"spatial={parts} cannot split this model at input height {height}: {error}; "
            f"spatial={fit} fits"
        ) from None


def _fits(model, height, parts):
    try:
        _walk(model, height, parts)
    except SplitError:
        return False
    return True


def step_bytes(model, shape, parts, itemsize=4):
    """Bytes a training step of ``model`` on an (N, C, H, W) batch sends, summed over the
    ``parts`` ranks of a row split (what ``SpatialParallel.counters`` counts):

    - ``halo_bytes``: ``halo_cost.halo_bytes`` of each window layer (forward rows, and
      their gradients for every layer but the first);
    - ``gather_bytes``: each rank's block of the tail's input, padded to the longest
      block, to each of the P - 1 others: P (P - 1) N C ceil(H'/P) W' itemsize;
    - ``grad_bytes``: the window layers' weights and biases, allreduced by every rank.
    """
    windows, gather_at, tail_height = plan_rows(model, shape[2], parts)
    layers = model._modules
    channels, width, halo = shape[1], shape[3], 0
    for index, (name, height) in enumerate(windows):
        layer = layers[name]
        rows = window_args(layer)
        halo += halo_bytes(
            (shape[0], channels, height, width), *rows, parts, itemsize, input_grad=index > 0
        )
        channels = layer.out_channels if isinstance(layer, L.Conv2d) else channels
        width = output_size(width, *window_args(layer, 1))
    longest = max(stop - start for start, stop in split_rows(tail_height, parts))
    weights = sum(p.data.size for name, _ in windows for p in layers[name].parameters())
    return {
        "halo_bytes": halo,
        "gather_bytes": parts * (parts - 1) * shape[0] * channels * longest * width * itemsize,
        "grad_bytes": parts * weights * itemsize if parts > 1 else 0,  # one rank sums nothing
    }


def local_rows(x, group):
    """This rank's block of rows, ``x[:, :, start:stop]`` of an (N, C, H, W) batch (a copy)."""
    start, stop = split_rows(x.shape[2], group.size)[group.rank]
    return get_array_module(x).ascontiguousarray(x[:, :, start:stop])


class SpatialParallel(L.Sequential):
    """``model`` with its leading window layers split over ``group``'s ranks by image rows.

    ``forward`` takes this rank's rows of a ``height``-row batch (``local_rows``)
    and returns what the serial model returns for the whole batch, on every rank.
    ``counters`` sums the bytes this rank sent (``halo_bytes``, ``gather_bytes``,
    ``grad_bytes``) and its halo messages.
    """

    def __init__(self, model, group, height):
        windows, gather_at, tail_height = plan_rows(model, height, group.size)
        super().__init__()
        comm = group.dup()  # halo messages never match another protocol's
        self.counters = RankCounters()
        heights = dict(windows)
        for name, layer in model._modules.items():
            if name in heights and isinstance(layer, L.Conv2d):
                layer = SpatialConv2d(layer, comm, heights[name], self.counters)
            elif name in heights:
                layer = SpatialPool2d(layer, comm, heights[name], self.counters)
            setattr(self, name, layer)
        self._gather_at, self._comm = gather_at, comm
        self._gather_rows = split_rows(tail_height, group.size)
        self.height = height

    def forward(self, x):
        for index, layer in enumerate(self._modules.values()):
            if index == self._gather_at:
                x = self.gather(x)
            x = layer(x)
        return self.gather(x) if self._gather_at == len(self._modules) else x

    def gather(self, x):
        """The whole activation on every rank from each rank's rows."""
        return GatherRows.apply(x, comm=self._comm, rows=self._gather_rows, counters=self.counters)


def spatial_parallel(model, group, height):
    """``SpatialParallel(model, group, height)``: see its docstring (collective over ``group``)."""
    return SpatialParallel(model, group, height)
