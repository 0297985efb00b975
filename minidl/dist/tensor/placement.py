"""Where each layer of a model goes on a tensor-parallel group: the rule (``plan``) and the
parallel model (``TensorParallel``).

A plan is one word per leaf layer. The rule walks the layers tracking whether the
activation between them is replicated or split (a block of features or channels):

- a ``Linear`` on a replicated input is ``"column"`` (output split), on a split input
  ``"row"`` (output replicated): Megatron-LM's pair (Shoeybi et al. 2019);
- a ``Conv2d`` likewise: ``"filter"`` on a replicated input, ``"input"`` on a split one;
- a ``Conv2d`` with as many groups as ranks is ``"group"`` (Krizhevsky et al. 2012's two
  columns): output split, a split input needs no message;
- activations and pooling run on a split activation as they are (``""``);
- any other layer needs the whole activation, so the split layer before it gathers its
  output (``"+gather"``), as does the model's last split layer.

Krizhevsky's one weird trick (2014, ``one_weird_trick_plan``): the layers before the
first ``Linear`` run on blocks of the batch with whole weights (``"batch"``, gradients
summed over the group), then the rule splits the rest: convolutions move gradients, fully
connected layers activations. Words passed to ``TensorParallel`` override the rule.
"""

from contextlib import nullcontext

from ...layers import AvgPool2d, Conv2d, Linear, MaxPool2d, ReLU, Sequential, Sigmoid, Tanh, leaves
from ...random import sample_rows
from .functions import TRAFFIC, Split, gather_blocks, gather_from_group, split_to_group, take_block
from .layers import (
    ColumnParallelLinear,
    FilterParallelConv2d,
    GroupParallelConv2d,
    InputChannelParallelConv2d,
    RowParallelLinear,
    ShardedModule,
)

PER_CHANNEL = (ReLU, Tanh, Sigmoid, MaxPool2d, AvgPool2d)  # run on a block of channels as they are
SPLITTING = {"column": ColumnParallelLinear, "filter": FilterParallelConv2d}  # out: split
JOINING = {"row": RowParallelLinear, "input": InputChannelParallelConv2d}  # in: split, out: whole
KINDS = {"column": Linear, "row": Linear, "filter": Conv2d, "input": Conv2d, "group": Conv2d}
WIDTHS = {  # the serial layer's attribute that each word splits
    "column": "out_features",
    "row": "in_features",
    "filter": "out_channels",
    "input": "in_channels",
    "group": "groups",
}


class PlacementError(ValueError):
    """A plan that cannot run: a layer of the wrong kind, an input split where it must be whole."""


def split_widths(model, plan):
    """(width, path, layer) of each layer ``plan`` splits: the features, channels or groups."""
    kinds = (word.partition("+")[0] for word in plan)
    return [
        (getattr(layer, WIDTHS[kind]), path, layer)
        for (path, layer), kind in zip(leaves(model), kinds, strict=True)
        if kind in WIDTHS
    ]


def _splits(layer):
    """Whether ``plan`` splits this layer: a ``Linear``, or a ``Conv2d`` without groups."""
    return isinstance(layer, Linear) or (isinstance(layer, Conv2d) and layer.groups == 1)


def plan(model, size=None) -> list:
    """The rule of the module doc applied to ``model``: one word per leaf layer (``size``: the
    group's, which grouped convolutions with as many groups are split over; None: no such)."""
    return _rule([layer for _, layer in leaves(model)], size)


def one_weird_trick_plan(model) -> list:
    """Data-parallel up to the first ``Linear`` ("batch"), the rule from there on."""
    layers = [layer for _, layer in leaves(model)]
    first = next((i for i, layer in enumerate(layers) if isinstance(layer, Linear)), len(layers))
    return ["batch"] * first + _rule(layers[first:])


def tail_plan(model, first, size=None) -> list:
    """The first ``first`` leaf layers as they are (``""``: another axis, such as a spatial
    front, splits them), the rule from there on."""
    layers = [layer for _, layer in leaves(model)]
    return [""] * first + _rule(layers[first:], size)


def _rule(layers, size=None):
    words, split, last = [], False, None
    for index, layer in enumerate(layers):
        word = ""
        if isinstance(layer, Conv2d) and layer.groups > 1 and layer.groups == size:
            word, split, last = "group", True, index
        elif _splits(layer):
            linear = isinstance(layer, Linear)
            word = ("row" if linear else "input") if split else ("column" if linear else "filter")
            split, last = not split, index
        elif split and not isinstance(layer, PER_CHANNEL):
            words[last] += "+gather"
            split = False
        words.append(word)
    if split:
        words[last] += "+gather"
    return words


class BatchParallel(Sequential):
    """A flat ``Sequential`` whose first ``count`` layers run on this rank's block of the batch
    (``split_to_group`` before them, ``gather_from_group`` after); the rest on the whole."""

    def __init__(self, sequential, comm, count):
        super().__init__(*sequential)
        object.__setattr__(self, "comm", comm)
        object.__setattr__(self, "count", count)

    def forward(self, x):
        n = x.shape[0]
        rows = Split(n, self.comm.size).slice(self.comm.rank)
        x = split_to_group(x, self.comm, 0)
        for index, layer in enumerate(self._modules.values()):
            if index == self.count:
                x = gather_from_group(x, self.comm, 0, n)
            with sample_rows(rows.start, rows.stop) if index < self.count else nullcontext():
                x = layer(x)  # a dropout mask per sample of the block
        return gather_from_group(x, self.comm, 0, n) if self.count == len(self) else x


class TensorParallel:
    """``model`` (a ``Sequential``, nested ones allowed) with its layers split over ``comm``.
    ``module`` is the parallel model (same parameter names, this rank's blocks) built by
    ``plan_words`` (default: the rule); layers not split are shared with ``model``, the
    split ones copied block by block, so ``model`` can be dropped once this is built.
    ``blocks`` maps a parameter between its block and its serial shape; ``state_items``
    gives the serial model's state one parameter at a time, ``gather_state`` and
    ``scatter_state`` map an optimizer's state dict.
    Collective over ``comm``."""

    def __init__(self, model, comm, plan_words=None):
        if not isinstance(model, Sequential):
            raise PlacementError(
                f"tensor parallelism splits a Sequential's layers, not a {type(model).__name__}"
            )
        blocks = [(p, m) for p, m in model.named_modules() if m._modules]
        path, block = next(((p, m) for p, m in blocks if not isinstance(m, Sequential)), ("", 0))
        if block:
            raise PlacementError(
                f"layer {path} ({type(block).__name__}) runs its layers in a forward of its own "
                "(a residual block's skip connection): tensor parallelism splits the layers of "
                "Sequentials only; use data parallelism, ZeRO, recomputation or a pipeline"
            )
        self.comm = comm
        layers = leaves(model)
        self.plan = list(plan(model, comm.size) if plan_words is None else plan_words)
        if len(self.plan) != len(layers):
            raise PlacementError(
                f"the plan has {len(self.plan)} words but the model has {len(layers)} layers "
                f"({', '.join(type(m).__name__ for _, m in layers)}); give one word per layer"
            )
        self._check_widths(model, layers)
        self.batch_layers = self._batch_prefix(layers)
        words = {path: word for (path, _), word in zip(layers, self.plan)}
        self._split = False
        self.module = self._build(model, "", words)
        if self.batch_layers:
            self.module = BatchParallel(self.module, comm, self.batch_layers)
        if self._split:
            raise PlacementError(
                "the model's output is split over the ranks; end the last split layer's word "
                "with '+gather'"
            )
        self.blocks = self._blocks(model)

    def _check_widths(self, model, layers):
        kinds = [KINDS.get(word.partition("+")[0]) for word in self.plan]
        if any(k is not None and not isinstance(m, k) for k, (_, m) in zip(kinds, layers)):
            return  # a word for the wrong kind of layer: _place names it
        narrow = [t for t in split_widths(model, self.plan) if t[0] < self.comm.size]
        if narrow:
            width, path, layer = min(narrow, key=lambda t: t[0])
            raise PlacementError(
                f"tp={self.comm.size} is wider than layer {path} ({type(layer).__name__}"
                f"({layer.extra_repr()})), which has {width} to split; tp <= {width} fits"
            )

    def _batch_prefix(self, layers):
        """How many first layers run on blocks of the batch ("batch"); their gradients are
        summed over the group by a hook as each is accumulated."""
        count = next((i for i, w in enumerate(self.plan) if w != "batch"), len(self.plan))
        if "batch" in self.plan[count:] or any("." in path for path, _ in layers[:count]):
            raise PlacementError(
                "'batch' runs the first layers of a flat Sequential on blocks of the batch; "
                "give it to a run of layers from the first on"
            )
        for _, layer in layers[:count]:
            for p in layer.parameters():
                p.register_post_accumulate_grad_hook(self._sum_over_group)
        return count

    def _sum_over_group(self, p):
        if self.comm.size > 1:
            TRAFFIC["allreduce"] += p.grad.nbytes
            self.comm.allreduce(p.grad, op="sum")

    def _build(self, sequential, prefix, words):
        children = []
        for name, child in sequential._modules.items():
            path = f"{prefix}.{name}" if prefix else name
            if child._modules:
                children.append(self._build(child, path, words))
            else:
                children.append(self._place(path, child, words[path]))
        return Sequential(*children)

    def _place(self, path, layer, word):
        kind, _, gather = word.partition("+")
        where = f"layer {path} ({type(layer).__name__})"
        if kind == "batch":
            return layer
        if not kind:
            if self._split and not isinstance(layer, PER_CHANNEL):
                raise PlacementError(
                    f"{where} needs its whole input but it arrives split; end the word of the "
                    "split layer before it with '+gather'"
                )
            return layer
        if kind not in KINDS or gather not in ("", "gather"):
            raise PlacementError(
                f"{where}: unknown plan word {word!r}; use column, row, filter, input "
                "(optionally +gather) or ''"
            )
        if kind == "group":
            return self._group(where, layer, gather)
        if not isinstance(layer, KINDS[kind]) or not _splits(layer):
            raise PlacementError(
                f"{where} cannot be {kind}-parallel: {kind} splits a "
                f"{KINDS[kind].__name__} without groups"
            )
        if kind in SPLITTING:
            if self._split:
                raise PlacementError(
                    f"{where} is {kind}-parallel but its input arrives split; make it "
                    f"{'row' if kind == 'column' else 'input'}, or gather before it"
                )
            self._split = not gather
            return SPLITTING[kind](layer, self.comm, gather_output=bool(gather))
        if gather:
            raise PlacementError(f"{where}: a {kind}-parallel layer's output is already whole")
        parallel = JOINING[kind](layer, self.comm, input_is_parallel=self._split)
        self._split = False
        return parallel

    def _group(self, where, layer, gather):
        if not isinstance(layer, Conv2d) or layer.groups != self.comm.size:
            raise PlacementError(
                f"{where} cannot be group-parallel: that needs a Conv2d with groups="
                f"{self.comm.size} (one per rank), not {getattr(layer, 'groups', 'no groups')}"
            )
        parallel = GroupParallelConv2d(
            layer, self.comm, input_is_parallel=self._split, gather_output=bool(gather)
        )
        self._split = not gather
        return parallel

    def _blocks(self, model):
        """The ``Blocks`` of this model's split parameters: which axis, of what serial shape."""
        owners = {}
        for _, m in self.module.named_modules():
            if isinstance(m, ShardedModule):
                for name, axis in m.split.items():
                    if getattr(m, name) is not None and axis is not None:
                        owners[id(getattr(m, name))] = axis
        shapes = dict(model.named_parameters())
        splits = {
            name: (owners[id(p)], shapes[name].shape)
            for name, p in self.module.named_parameters()
            if id(p) in owners
        }
        return Blocks(self.comm, splits)

    def state_items(self):
        """(name, value) of the serial model's ``state_dict``, each made whole in turn
        (collective): at most one split parameter's whole value exists at a time."""
        for name, value in self.module.state_dict().items():
            yield name, self.blocks.whole(name, value)

    def gather(self, model):
        """Write every parameter's whole value into ``model``, the serial model (collective)."""
        model.load_state_dict(dict(self.state_items()))

    def gather_state(self, state_dict):
        """An optimizer state dict of the parallel model's parameters, made whole (collective)."""
        names = [name for name, _ in self.module.named_parameters()]
        return {**state_dict, "state": list(self.blocks.whole_states(names, state_dict["state"]))}

    def scatter_state(self, state_dict):
        """This rank's blocks of an optimizer state dict of the serial model's parameters."""
        names = [name for name, _ in self.module.named_parameters()]
        return {**state_dict, "state": list(self.blocks.block_states(names, state_dict["state"]))}


class Blocks:
    """Where the blocks of a tensor-parallel model's split parameters lie: ``splits`` maps a
    parameter's name to (the axis it is split along over ``comm``, its serial shape).
    ``whole`` and ``block`` map one value between this rank's block and the serial shape; an
    optimizer's per-parameter states map the same way, value by value."""

    def __init__(self, comm, splits):
        self.comm, self.splits = comm, splits

    def whole(self, name, array):
        """The serial-shaped value of ``name`` from this rank's block ``array`` (collective for
        a split parameter; ``array`` itself for the others)."""
        if name not in self.splits:
            return array
        axis, shape = self.splits[name]
        return gather_blocks(self.comm, array, axis, shape[axis])

    def block(self, name, array):
        """This rank's block of ``array``, a serial-shaped value of ``name``."""
        if name not in self.splits:
            return array
        axis, _ = self.splits[name]
        return take_block(array, axis, self.comm.rank, self.comm.size)

    def block_shape(self, name):
        axis, shape = self.splits[name]
        size = Split(shape[axis], self.comm.size).sizes[self.comm.rank]
        return (*shape[:axis], size, *shape[axis + 1 :])

    def whole_states(self, names, states):
        """Optimizer states of parameters ``names``, each made whole in turn (collective)."""
        return self._map(names, states, self.block_shape, self.whole)

    def block_states(self, names, states):
        """This rank's blocks of serial-shaped optimizer states of parameters ``names``."""
        return self._map(names, states, lambda name: self.splits[name][1], self.block)

    def _map(self, names, states, shape, convert):
        for name, state in zip(names, states, strict=True):
            split = name in self.splits
            yield {
                key: convert(name, value)
                if split and tuple(getattr(value, "shape", ())) == tuple(shape(name))
                else value
                for key, value in state.items()
            }
