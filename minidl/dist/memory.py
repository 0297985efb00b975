"""What each rank of a layout holds: ``perf.memory``'s four kinds of bytes for its share.

Rank r of ``--grid dp=D,pp=P,spatial=S,tp=T`` (coordinates ``GridShape.coords``) holds

- tensor parallelism: its blocks of the layers the plan splits (``tensor.plan``, or
  ``one_weird_trick_plan``; blocks of ``intmath.block_sizes``) and the other layers whole
  (``perf.tensor_volume.gradient_bytes``); its blocks of the activations
  (``perf.memory.split_activations``, an estimate);
- spatial parallelism: every parameter; 1/S of the split front's activations (its rows;
  halos not counted: an estimate);
- pipeline parallelism: the layers of its v stages (``pipeline.cut.cut_stages``, stage
  c P + r as its chunk c). A micro-batch (ceil(b / M) rows) keeps its stage's activations and
  the activation it received from its forward to its backward, as many at once as the
  schedule's instructions have in flight (``perf.memory.peak_in_flight``); PipeDream also
  keeps an older weight version per update in flight (``peak_stashed`` of
  ``perf.pipeline_simulate``), counted with the parameters;
- data parallelism: the same on every replica, or ZeRO's shards of the rank's parameters
  (``perf.memory.model_state``), cut bucket by bucket; stage 3 runs each layer with
  parameters as a recomputed segment of its own (its weights gathered again in backward),
  so such a layer keeps its input and output but not what its backward needs.

Recomputation cuts the model into segments as ``L.Recompute`` does, a pipeline stage's at
its bounds (``Recompute.within``).
"""

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np

from ..layers import Recompute, Sequential, leaves
from ..perf.memory import (
    KINDS,
    activation_bytes,
    layer_activations,
    model_state,
    peak_in_flight,
    split_activations,
    state_arrays,
    zero_share,
)
from ..perf.pipeline_simulate import simulate, stage_of
from ..perf.summary import aligned
from ..perf.tensor_volume import block_numbers
from ..train.config import TrainConfig, build_model
from .data_parallel import bucket_runs
from .grid import GridShape
from .pipeline.cut import cut_stages
from .pipeline.schedules import build, default_chunks
from .spatial import plan_rows
from .tensor import one_weird_trick_plan, plan, tail_plan
from .tensor.placement import split_widths


@dataclass
class RankMemory:
    """Rank ``rank``'s predicted ``memory`` (``perf.memory.Memory``): its ``coords`` on the
    grid's axes longer than 1, the ``(stage, start, stop)`` of each pipeline stage it holds
    (empty without a pipeline) and the ``parameters`` (numbers) of its share of the model."""

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
    stages="memory",
    tp_layout="rule",
    bucket_mb=4.0,
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
    pipeline = None
    if grid.pp > 1:
        pipeline = _Pipeline(model, grid.pp, micro_batches, schedule, chunks)
        pipeline.cut(stages, input_shape, batch, optimizer)
    rows = math.ceil(batch / micro_batches) if pipeline else batch
    layers = layer_activations(model, input_shape, rows, device)
    front = plan_rows(model, input_shape[-2], grid.spatial)[1] if grid.spatial > 1 else 0
    ranks = []
    for rank in range(grid.size):
        at = grid.coords(rank)
        numbers = [
            block_numbers(Sequential(layer), [word], grid.tp, at["tp"])
            for layer, word in zip(model, words)
        ]
        own = [sum(layer) for layer in numbers]
        acts = split_activations(layers, words, grid.tp, at["tp"], rows) if grid.tp > 1 else layers
        acts = [_rows(a, grid.spatial) if i < front else a for i, a in enumerate(acts)]
        rebuilt = 0
        if zero == 3:  # a layer with parameters keeps its input, rebuilt in backward
            rebuilt = max(a.held for a, n in zip(acts, own) if n)
            acts = [replace(a, saved=0) if n else a for a, n in zip(acts, own)]
        stages = pipeline.stages(at["pp"]) if pipeline else [(0, 0, len(model))]
        held = []
        for _, start, stop in stages:
            segments = segmented.within(start, stop) if segmented else None
            kept, largest = activation_bytes(acts[start:stop], segments)
            held.append(kept + (acts[start - 1].output if start > 0 else 0))
            rebuilt = max(rebuilt, largest)
        parameters = sum(sum(own[a:b]) for _, a, b in stages)
        widest = max(max(own[a:b]) for _, a, b in stages)
        sizes = [n for layer in numbers for n in layer]
        share = zero_share(_buckets(sizes, itemsize, bucket_mb), grid.dp, at["dp"])
        memory = model_state(parameters, k, itemsize, zero, share, widest)
        memory.activations = pipeline.in_flight(at["pp"], held) if pipeline else held[0]
        memory.recomputed = rebuilt
        if pipeline:
            memory.params += pipeline.stashed[at["pp"]] * parameters * itemsize
        axes = {axis: i for axis, i in at.items() if getattr(grid, axis) > 1}
        ranks.append(RankMemory(rank, axes, tuple(stages) if pipeline else (), parameters, memory))
    return ranks


class _Pipeline:
    """The stage cut and the schedule's programs of a pipeline of ``ranks`` ranks."""

    def __init__(self, model, ranks, micro_batches, schedule, chunks):
        self.model, self.ranks, self.chunks = model, ranks, chunks or default_chunks(schedule)
        self.micro_batches, self.schedule = micro_batches, schedule
        self.programs = build(schedule, ranks, micro_batches, self.chunks)
        self.stashed = simulate(self.programs).peak_stashed or (0,) * ranks

    def cut(self, stages, input_shape, rows, optimizer):
        """The stages as ``minidl train --stages`` cuts them (``pipeline.cut``)."""
        schedule = dict(micro_batches=self.micro_batches, schedule=self.schedule)
        self.bounds = cut_stages(
            self.model,
            stages,
            self.ranks,
            input_shape,
            rows,
            chunks=self.chunks,
            optimizer=optimizer,
            **schedule,
        ).bounds

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


def _buckets(sizes, itemsize, bucket_mb):
    """The numbers in each gradient bucket of parameters of ``sizes`` numbers: last first, runs
    of at most ``bucket_mb`` MiB (``data_parallel.bucket_runs``, as ``make_buckets`` groups)."""
    runs = bucket_runs([n * itemsize for n in sizes], int(bucket_mb * 2**20))
    return [sum(sizes[i] for i in run) for run in runs]


def _rows(layer, parts):
    """A layer of the spatial front: 1/``parts`` of its activations (its block of rows)."""
    return replace(
        layer,
        output=layer.output // parts,
        padding=layer.padding // parts,
        saved=layer.saved // parts,
    )


COLUMNS = ("rank", "grid", "stages (layers)", "parameters", "params", "grads", "state")
COLUMNS += ("activations", "total MiB", "total bytes")


def mib(nbytes):
    """Bytes as MiB with two decimals."""
    return f"{nbytes / 2**20:.2f}"


def format_memory(ranks):
    """The per-rank table of ``predict_memory``'s prediction, in MiB (activations: those held
    between forward and backward plus the largest recomputed segment's)."""
    rows = []
    for r in ranks:
        m = r.memory
        rows.append(
            (
                str(r.rank),
                ",".join(f"{axis}={i}" for axis, i in r.coords.items()),
                " ".join(f"{k}:{a}-{b - 1}" for k, a, b in r.stages) or "-",
                f"{r.parameters:,}",
                *(mib(v) for v in (m.params, m.grads, m.state, m.activations + m.recomputed)),
                mib(m.total),
                f"{m.total:,}",
            )
        )
    line = aligned([COLUMNS, *rows], 3)
    rule = "-" * len(line(COLUMNS))
    return "\n".join([line(COLUMNS), rule, *map(line, rows)])


IDX_IMAGES = (1, 28, 28)  # MNIST and Fashion-MNIST: one 28x28 channel, ten classes


def predict_run(config):
    """``predict_memory`` for the run a ``config.json`` describes (``minidl train``'s record),
    or a one-line reason why there is none."""
    if config.get("dataset") == "folder":
        return "config.json does not say the image folder's classes and sizes"
    if config.get("dist") not in (None, "sync"):
        return f"--dist {config['dist']} keeps the optimizer's state on servers"
    fields = {k: v for k, v in config.items() if k in TrainConfig.__dataclass_fields__}
    trained = TrainConfig(**fields | {"recompute": None})
    stand_in = SimpleNamespace(images=np.empty((0, *IDX_IMAGES)), classes=range(10))
    model = build_model(trained, stand_in)
    grid = GridShape.parse(config["grid"]) if config.get("grid") else None
    if grid is None and config.get("dist") == "sync":
        grid = GridShape(dp=config.get("world_size", 1))
    return predict_memory(
        model,
        IDX_IMAGES,
        config["batch_size"],
        config["optimizer"],
        grid,
        config.get("zero", 0),
        config.get("recompute"),
        config.get("micro_batches", 1),
        config.get("schedule", "1f1b"),
        config.get("chunks"),
        config.get("stages", "layers"),  # runs before the memory cut were cut by layers
        config.get("tp_layout", "rule"),
        config.get("bucket_mb", 4.0),
        config.get("device", "cpu"),
    )


def format_measured(record, predicted):
    """A ``"memory"`` record's per-rank bytes (MiB) next to ``predicted`` (``RankMemory``s, or
    the reason there are none)."""
    ranks = len(record["params"])
    guess = predicted if isinstance(predicted, list) and len(predicted) == ranks else None
    head = ("rank", *KINDS, "peak RSS")
    rows = []
    for r in range(ranks):
        cells = [str(r)]
        for kind in KINDS:
            value = record[kind][r]
            cell = "-" if value is None else mib(value)
            if guess is not None:
                m = guess[r].memory
                cell += " / " + mib(m.activations if kind == "activations" else getattr(m, kind))
            cells.append(cell)
        rows.append((*cells, mib(record["max_rss"][r])))
    lines = list(map(aligned([head, *rows], 0), (head, *rows)))
    what = "measured / predicted" if guess is not None else f"measured ({predicted})"
    title = (
        f"memory per rank, epoch {record['epoch']} (MiB, {what}; peaks over the first "
        f"{record['sampled_steps']} steps)"
    )
    notes = [record["note"]] if record.get("note") else []
    return "\n".join([title, *lines, *notes])
