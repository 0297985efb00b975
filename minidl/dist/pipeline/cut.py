"""Where a pipeline cuts a ``Sequential`` into stages (Ben-Nun & Hoefler 2019, §5.3).

Stage k holds the contiguous layers ``bounds[k] = (start, stop)`` of a ``Partition``:
uniform by layer count, min-max by parameter count, measured time or memory
(``min_max_bounds``, a linear-partition dynamic programme), or at given cut points. A
pipeline runs at its slowest stage's pace and is only as large as its largest stage: a
cut's balance is max_k cost_k / mean_k cost_k (1.0 is perfect).

By memory (``memory_partition``, what ``minidl train --grid pp=P`` cuts by): stage k on
rank r as its chunk c holds, for its layers i..j-1 with W_l parameters and A_l bytes of
activations per micro-batch (``perf.memory.layer_activations``; the activation it
receives, the output of layer i-1, besides),

    (2 + K + V_r) b sum_l W_l  +  F_k (sum_l A_l + O_{i-1})

with b bytes per number, K state arrays per parameter (``perf.memory.STATE_ARRAYS``),
V_r PipeDream's stashed weight versions on rank r, and F_k the most micro-batches
the schedule keeps in flight on the stage (``in_flight``: 1F1B min(M, S-k), GPipe M). A
tp-split stage holds about 1/T of the same; a recomputed one less: the cut counts neither.
"""

import math
from dataclasses import dataclass

import numpy as np

from minidl.intmath import block_bounds
from minidl.layers import Sequential
from minidl.perf.memory import layer_activations, peak_in_flight, state_arrays
from minidl.perf.pipeline_simulate import place_of, simulate

from .schedules import build

BALANCE_BY = ("layers", "parameters")  # what partition() balances; memory_partition: bytes


@dataclass(frozen=True)
class Partition:
    """Where a model is cut: ``bounds[k] = (start, stop)`` layers of stage k and its cost."""

    bounds: tuple
    costs: tuple
    by: str

    @property
    def balance(self):
        """max / mean of the per-stage cost (1.0: every stage costs the same)."""
        mean = sum(self.costs) / len(self.costs)
        return max(self.costs) / mean if mean > 0 else 1.0

    def __len__(self):
        return len(self.bounds)


def min_max_bounds(costs, num_stages, stage_cost=None):
    """The contiguous cut into non-empty stages with the smallest largest-stage cost: with
    best[k][j] the least max-cost of layers 0..j-1 in k stages,
    best[k][j] = min_i max(best[k-1][i], cost(k-1, i, j)), where stage k's cost of layers
    i..j-1 is ``stage_cost(k, i, j)`` or sum(costs[i:j]). Ties keep the earliest cut."""
    n = len(costs)
    prefix = np.concatenate([[0], np.cumsum(costs)]).tolist()
    if stage_cost is None:

        def stage_cost(k, i, j):
            return prefix[j] - prefix[i]

    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0
    for k in range(1, num_stages + 1):
        for j in range(k, n - (num_stages - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], stage_cost(k - 1, i, j))
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    bounds, stop = [], n
    for k in range(num_stages, 0, -1):
        start = cut[k][stop]
        bounds.append((start, stop))
        stop = start
    return bounds[::-1]


def layer_costs(model, by="parameters"):
    """The cost of each layer of ``model``: 1 per layer, or its number of trained scalars."""
    if by not in BALANCE_BY:
        raise ValueError(f"unknown stage cost {by!r}; choose one of {', '.join(BALANCE_BY)}")
    return [1 if by == "layers" else layer.num_parameters() for layer in model]


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
    ``by``: ``"layers"`` (uniform) or ``"parameters"`` (min-max); with ``cuts`` (the first
    layer of stages 1..P-1) ``by`` only names the cost the balance is measured in. Bad
    input is refused before any work, with what would fit."""
    _check_model(model, num_stages)
    costs = layer_costs(model, by)
    if cuts is not None:
        bounds = _cut_bounds(len(model), num_stages, cuts)
    elif by == "layers":
        bounds = block_bounds(len(model), num_stages)  # the first stages take the extra layers
    else:
        bounds = min_max_bounds(costs, num_stages)
    stage_costs = tuple(sum(costs[a:b]) for a, b in bounds)
    return Partition(tuple(bounds), stage_costs, by)


def cut_by_cost(costs, num_stages):
    """The ``Partition`` into ``num_stages`` contiguous stages that minimises the largest
    stage's summed ``costs`` (one number per layer)."""
    if not 1 <= num_stages <= len(costs):
        raise ValueError(f"cannot cut {len(costs)} layers into {num_stages} stages")
    bounds = min_max_bounds(list(costs), num_stages)
    return Partition(tuple(bounds), tuple(float(sum(costs[a:b])) for a, b in bounds), "time")


def in_flight(programs, chunks):
    """F_k: the most micro-batches each stage (k = c P + r) has between forward and backward
    (``peak_in_flight`` of its rank's program, counting its chunk's micro-batches alone)."""
    ranks = len(programs)
    return [
        peak_in_flight(programs[k % ranks], [int(c == k // ranks) for c in range(chunks)])
        for k in range(ranks * chunks)
    ]


def memory_partition(
    model,
    ranks,
    input_shape,
    rows,
    *,
    micro_batches=1,
    schedule="1f1b",
    chunks=1,
    optimizer="sgd",
    cuts=None,
):
    """The ``Partition`` of ``model`` into ``ranks * chunks`` stages whose largest holds the
    fewest bytes (the module doc's formula) when each of ``micro_batches`` micro-batches of a
    replica's ``rows`` rows of ``input_shape`` samples trains under ``schedule``; with
    ``cuts`` (the first layer of stages 1..S-1), the bytes of that cut's stages."""
    num_stages = ranks * chunks
    _check_model(model, num_stages)
    itemsize = next((p.dtype.itemsize for p in model.parameters()), 4)
    weights = [sum(p.size for p in layer.parameters()) * itemsize for layer in model]
    held, output = [0] * len(model), [0] * len(model)
    batch = math.ceil(rows / micro_batches)
    for leaf in layer_activations(model, input_shape, batch):
        index = int(leaf.name.partition("#")[0].split(".")[0])
        held[index] += leaf.held
        output[index] = leaf.output
    programs = build(schedule, ranks, micro_batches, chunks)
    flight = in_flight(programs, chunks)
    stashed = simulate(programs).peak_stashed or (0,) * ranks
    fixed = 2 + state_arrays(optimizer)
    weight_sums = np.concatenate([[0], np.cumsum(weights)]).tolist()
    held_sums = np.concatenate([[0], np.cumsum(held)]).tolist()

    def stage_cost(k, i, j):
        copies = fixed + stashed[place_of(k, ranks)[0]]
        received = output[i - 1] if i > 0 else 0
        return copies * (weight_sums[j] - weight_sums[i]) + flight[k] * (
            held_sums[j] - held_sums[i] + received
        )

    if cuts is None:
        bounds = min_max_bounds(weights, num_stages, stage_cost)
    else:
        bounds = _cut_bounds(len(model), num_stages, cuts)
    costs = tuple(stage_cost(k, a, b) for k, (a, b) in enumerate(bounds))
    return Partition(tuple(bounds), costs, "memory")


def cut_stages(model, by, ranks, input_shape, rows, *, chunks=1, **schedule):
    """The ``Partition`` of ``model`` into ``ranks * chunks`` stages that ``minidl train
    --stages by`` makes: by memory (``memory_partition``, for ``rows`` rows of ``input_shape``
    per replica and ``schedule``'s micro_batches, schedule and optimizer), layers or
    parameters (``partition``)."""
    if by == "memory":
        return memory_partition(model, ranks, input_shape, rows, chunks=chunks, **schedule)
    return partition(model, ranks * chunks, by=by)
