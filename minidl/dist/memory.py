"""What each rank of a layout holds: ``perf.memory``'s four kinds of bytes for its share.

Rank r of ``--grid dp=D,pp=P,spatial=S,tp=T`` (coordinates ``GridShape.coords``) holds

- tensor parallelism: its blocks of the layers the plan splits (``tensor.plan``, or
  ``one_weird_trick_plan``; blocks of ``intmath.block_sizes``) and the other layers whole
  (``perf.tensor_volume.gradient_bytes``); its blocks of the activations
  (``perf.memory.split_activations``, an estimate);
- spatial parallelism: every parameter; 1/S of the split front's activations (its rows;
  halos not counted: an estimate);
- pipeline parallelism: the layers of its v stages (``pipeline.partition`` by layers, stage
  c P + r as its chunk c). A micro-batch (ceil(b / M) rows) keeps its stage's activations and
  the activation it received from its forward to its backward, as many at once as the
  schedule's instructions have in flight (``perf.memory.peak_in_flight``); PipeDream also
  keeps an older weight version per update in flight (``peak_stashed`` of
  ``perf.pipeline_simulate``), counted with the parameters;
- data parallelism: the same on every replica, or ZeRO's shards of the rank's parameters
  (``perf.memory.model_state``).

Recomputation cuts the model into segments as ``L.Recompute`` does, a pipeline stage's at
its bounds (``Recompute.within``).
"""

import math
from dataclasses import dataclass, replace

from ..layers import Recompute, Sequential, leaves
from ..perf.memory import (
    activation_bytes,
    layer_activations,
    model_state,
    peak_in_flight,
    split_activations,
    state_arrays,
)
from ..perf.pipeline_simulate import simulate, stage_of
from ..perf.tensor_volume import gradient_bytes
from .grid import GridShape
from .pipeline import partition
from .pipeline.schedules import build, default_chunks
from .spatial import plan_rows
from .tensor import one_weird_trick_plan, plan, tail_plan
from .tensor.placement import split_widths


@dataclass
class RankMemory:
    """Rank ``rank``'s predicted ``memory`` (``perf.memory.Memory``): its grid ``coords``, the
    ``(stage, start, stop)`` of each pipeline stage it holds (empty without a pipeline) and
    the ``parameters`` (numbers) of its share of the model."""

    rank: int
    coords: dict
    stages: tuple
    parameters: int
    memory: object


def predict_memory(
    model,
    input_shape,
    batch,
    optimizer="momentum",
    grid=None,
    zero=0,
    recompute=None,
    micro_batches=1,
    schedule="1f1b",
    chunks=None,
    tp_layout="rule",
    device="cpu",
):
    """A ``RankMemory`` per rank of ``grid`` (a ``GridShape``; None: one process) training
    ``model`` (a flat ``Sequential``) on batches of ``batch`` samples of ``input_shape`` per
    replica with the update rule ``optimizer``; the other options are ``minidl train``'s."""
    if not isinstance(model, Sequential) or len(leaves(model)) != len(model):
        raise ValueError("memory is predicted for a Sequential of layers, none nested")
    grid = grid or GridShape()
    itemsize = next(model.parameters()).dtype.itemsize
    k = state_arrays(optimizer)
    words = _plan(model, grid, input_shape, tp_layout)
    segmented = Recompute(model, recompute) if recompute else None
    pipeline = _Pipeline(model, grid.pp, micro_batches, schedule, chunks) if grid.pp > 1 else None
    rows = math.ceil(batch / micro_batches) if pipeline else batch
    layers = layer_activations(model, input_shape, rows, device)
    front = plan_rows(model, input_shape[-2], grid.spatial)[1] if grid.spatial > 1 else 0
    ranks = []
    for rank in range(grid.size):
        at = grid.coords(rank)
        own = [
            gradient_bytes(Sequential(layer), [word], grid.tp, at["tp"], itemsize) // itemsize
            for layer, word in zip(model, words)
        ]
        acts = split_activations(layers, words, grid.tp, at["tp"], rows) if grid.tp > 1 else layers
        acts = [_rows(a, grid.spatial) if i < front else a for i, a in enumerate(acts)]
        stages = pipeline.stages(at["pp"]) if pipeline else [(0, 0, len(model))]
        held, rebuilt = [], 0
        for _, start, stop in stages:
            segments = segmented.within(start, stop) if segmented else None
            kept, largest = activation_bytes(acts[start:stop], segments)
            held.append(kept + (acts[start - 1].output if start > 0 else 0))
            rebuilt = max(rebuilt, largest)
        parameters = sum(sum(own[a:b]) for _, a, b in stages)
        widest = max(max(own[a:b]) for _, a, b in stages)
        memory = model_state(parameters, k, itemsize, zero, grid.dp, at["dp"], widest)
        memory.activations = pipeline.in_flight(at["pp"], held) if pipeline else held[0]
        memory.recomputed = rebuilt
        if pipeline:
            memory.params += pipeline.stashed[at["pp"]] * parameters * itemsize
        ranks.append(RankMemory(rank, at, tuple(stages) if pipeline else (), parameters, memory))
    return ranks


class _Pipeline:
    """The stage cut and the schedule's programs of a pipeline of ``ranks`` ranks."""

    def __init__(self, model, ranks, micro_batches, schedule, chunks):
        self.ranks, self.chunks = ranks, chunks or default_chunks(schedule)
        self.bounds = partition(model, ranks * self.chunks).bounds
        self.programs = build(schedule, ranks, micro_batches, self.chunks)
        self.stashed = simulate(self.programs).peak_stashed or (0,) * ranks

    def stages(self, rank):
        """``(stage, start, stop)`` of each chunk of ``rank``."""
        return [
            (k, *self.bounds[k])
            for k in (stage_of(rank, c, self.ranks) for c in range(self.chunks))
        ]

    def in_flight(self, rank, chunk_bytes):
        return peak_in_flight(self.programs[rank], chunk_bytes)


def _plan(model, grid, input_shape, tp_layout):
    """The tensor-parallel plan's word per layer (all ``""`` without tp)."""
    if grid.tp == 1:
        return [""] * len(model)
    if grid.spatial > 1:
        words = tail_plan(model, plan_rows(model, input_shape[-2], grid.spatial)[1], grid.tp)
    elif tp_layout == "one-weird-trick":
        words = one_weird_trick_plan(model)
    else:
        words = plan(model, grid.tp)
    narrow = [t for t in split_widths(model, words) if t[0] < grid.tp]
    if narrow:
        width, path, layer = min(narrow, key=lambda t: t[0])
        raise ValueError(
            f"tp={grid.tp} is wider than layer {path} ({type(layer).__name__}), which has "
            f"{width} to split; tp <= {width} fits"
        )
    return words


def _rows(layer, parts):
    """A layer of the spatial front: 1/``parts`` of its activations (its block of rows)."""
    return replace(layer, output=layer.output // parts, saved=layer.saved // parts)
