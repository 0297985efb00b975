"""Cut a ``Sequential`` into pipeline stages (layer pipelining: the survey, §5.3).

Stage k holds the contiguous layers ``bounds[k] = (start, stop)``. Three ways to cut:
uniform by layer count (stage sizes differ by at most one), by parameter count (the
contiguous cut that minimises the largest stage, a linear-partition dynamic programme),
or at user-given cut points. A pipeline runs at the pace of its slowest stage, so the
cut is reported with its balance = max_k cost_k / mean_k cost_k (1.0 is perfect).
The cut (``Partition``) and the programme (``min_max_bounds``) live with the pipeline
profile in ``minidl.perf.pipeline_profile``, which also cuts by measured time; this
module builds the ``Stage`` modules of a cut.
"""

import numpy as np

from minidl.layers import Module, Sequential
from minidl.perf.pipeline_profile import Partition, min_max_bounds

BALANCE_BY = ("layers", "parameters")


def layer_costs(model, by="parameters"):
    """The cost of each layer of ``model``: 1 per layer, or its number of trained scalars."""
    if by not in BALANCE_BY:
        raise ValueError(f"unknown stage cost {by!r}; choose one of {', '.join(BALANCE_BY)}")
    return [1 if by == "layers" else layer.num_parameters() for layer in model]


class Stage(Module):
    """Layers ``start..stop-1`` of a ``Sequential``, registered under their serial indices.

    ``named_parameters()`` thus yields ``"3.weight"`` for the model's layer 3, the
    name the whole model gives it, so stages' state dicts merge into the model's.
    """

    def __init__(self, model, start, stop):
        super().__init__()
        for index in range(start, stop):
            setattr(self, str(index), model[index])

    def forward(self, x):
        for layer in self._modules.values():
            x = layer(x)
        return x


def _check_model(model, num_stages):
    if not isinstance(model, Sequential):
        raise TypeError(
            f"pipeline stages cut a Sequential, got a {type(model).__name__}; "
            "write the model as L.Sequential(layer, layer, ...)"
        )
    if isinstance(num_stages, bool) or not isinstance(num_stages, (int, np.integer)):
        raise TypeError(f"the number of stages must be an int, got {num_stages!r}")
    if num_stages < 1:
        raise ValueError(f"a pipeline needs at least 1 stage, got {num_stages}")
    if num_stages > len(model):
        raise ValueError(
            f"cannot cut a model of {len(model)} layers into {num_stages} stages "
            f"(each stage needs a layer); use at most {len(model)} stages"
        )


def _uniform_bounds(num_layers, num_stages):
    """Stage sizes differ by at most one; the first stages take the extra layers."""
    sizes = [len(chunk) for chunk in np.array_split(np.arange(num_layers), num_stages)]
    stops = np.cumsum(sizes).tolist()
    return [(stop - size, stop) for size, stop in zip(sizes, stops)]


def _cut_bounds(num_layers, num_stages, cuts):
    """Bounds from the first layer index of stages 1..P-1 (strictly increasing, in 1..L-1)."""
    cuts = [int(c) for c in cuts]
    if len(cuts) != num_stages - 1:
        raise ValueError(
            f"{num_stages} stages need {num_stages - 1} cut points (the first layer of "
            f"stages 1..{num_stages - 1}), got {len(cuts)}: {cuts}"
        )
    edges = [0, *cuts, num_layers]
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(
            f"cut points must increase strictly within 1..{num_layers - 1} so that every "
            f"stage gets a layer, got {cuts} for a model of {num_layers} layers"
        )
    return list(zip(edges, edges[1:]))


def partition(model, num_stages, by="layers", cuts=None):
    """Cut ``model`` (a ``Sequential``) into ``num_stages`` stages; returns a ``Partition``.

    ``by``: ``"layers"`` (uniform by layer count) or ``"parameters"`` (min-max by
    parameter count); with ``cuts`` (the first layer of stages 1..P-1) the stages
    are the user's and ``by`` only names the cost the balance is measured in.
    Bad input is refused before any work, with what would fit.
    """
    _check_model(model, num_stages)
    costs = layer_costs(model, by)
    if cuts is not None:
        bounds = _cut_bounds(len(model), num_stages, cuts)
    elif by == "layers":
        bounds = _uniform_bounds(len(model), num_stages)
    else:
        bounds = min_max_bounds(costs, num_stages)
    stage_costs = tuple(sum(costs[a:b]) for a, b in bounds)
    return Partition(tuple(bounds), stage_costs, by)


def build_stage(model, partition, index):
    """The ``Stage`` module of stage ``index`` (it shares the model's layers)."""
    start, stop = partition.bounds[index]
    return Stage(model, start, stop)
