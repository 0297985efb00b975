"""Pipeline stages, and ``PipelineTrainer`` that trains a ``Sequential`` cut into them.

Layer pipelining (Ben-Nun & Hoefler 2019, §5.3): stage k holds the contiguous layers
``bounds[k] = (start, stop)`` of a ``Partition`` (``cut.py``).

    trainer = PipelineTrainer(model, comm, optimizer=lambda ps: optim.SGD(ps, lr=0.1),
                              micro_batches=8, schedule="1f1b")
    loss = trainer.step(x, y)          # on every rank: the batch's mean loss
    state = trainer.state_dict()       # on rank 0: the whole model, serial names
    whole = trainer.full_optimizer_state()   # every rank: a one-process optimizer's state
    trainer.load_optimizer_state(whole)      # each rank takes its parameters' share

Every rank builds the same model and passes the same batch (stage 0 reads ``x``, the
last stage ``y``); weights start from rank 0's. A step equals the serial model's step on
the whole batch, for any schedule and micro-batch count. A batch with fewer rows than
``micro_batches`` runs one micro-batch per row (interleaved: the largest multiple of P).

With ``data_parallel`` (the ``dp`` group of a ``Grid``) each pipeline replica trains on
its own batch and the ranks holding the same stage average their gradients in one
allreduce per step, so D replicas with b rows each equal one process with D*b rows.

PipeDream (``schedule="pipedream"``) updates after every micro-batch's backward, so a
step is M updates, not the serial one; ``staleness`` counts how late each gradient was.

Checkpoints: ``full_state_dict`` and ``full_optimizer_state`` hold the run as one process
holds it (serial names, parameter order), so a checkpoint moves between layouts.
PipeDream's stashed weights need no saving: no version is in flight between batches.

BatchNorm statistics are per micro-batch, as in GPipe, and the running statistics update
once per micro-batch in order: with M > 1 a step equals one process applying the model to
each micro-batch separately and summing the losses scaled by n_m / N.
"""

from collections import OrderedDict

import numpy as np

from minidl import backend
from minidl import functional as F
from minidl.dist.data_parallel import DistributedOptimizer
from minidl.dist.pipeline.cut import BALANCE_BY, Partition, partition
from minidl.dist.pipeline.executor import PipelineExecutor, check_tag_room
from minidl.dist.pipeline.schedules import ASYNCHRONOUS, build, default_chunks
from minidl.layers import Module, Recompute
from minidl.layers.recompute import run_segments
from minidl.perf.pipeline_simulate import stage_of


class Stage(Module):
    """Layers ``start..stop-1`` of a ``Sequential`` under their serial indices (``"3.weight"``
    for layer 3), so stages' state dicts merge into the model's. Of a ``Recompute`` model, the
    stage recomputes its share of the segments, cut at the stage's bounds."""

    def __init__(self, model, start, stop):
        super().__init__()
        for index in range(start, stop):
            setattr(self, str(index), model[index])
        self.segments = model.within(start, stop) if isinstance(model, Recompute) else None

    def forward(self, x):
        layers = list(self._modules.values())
        if self.segments is not None:
            return run_segments(layers, self.segments, x)
        for layer in layers:
            x = layer(x)
        return x


def build_stage(model, partition, index):
    """The ``Stage`` module of stage ``index`` (it shares the model's layers)."""
    start, stop = partition.bounds[index]
    return Stage(model, start, stop)


# ---- the trainer ----------------------------------------------------------------------------
def _partition(model, stages, num_stages):
    """``stages``: "layers", "parameters", a sequence of cut points, or a ``Partition``."""
    if isinstance(stages, Partition):
        if len(stages) != num_stages:
            raise ValueError(
                f"the partition has {len(stages)} stages, the pipeline needs {num_stages} "
                "(ranks x chunks)"
            )
        return stages
    if isinstance(stages, str):
        if stages == "memory":
            raise ValueError(
                "stages='memory' needs the batch the stages will hold: pass "
                "memory_partition(model, ranks, input_shape, rows, ...), or 'layers'"
            )
        if stages not in BALANCE_BY:
            raise ValueError(
                f"stages={stages!r}: choose {' or '.join(map(repr, BALANCE_BY))}, "
                "a list of cut points, or a Partition"
            )
        return partition(model, num_stages, by=stages)
    return partition(model, num_stages, by="parameters", cuts=stages)


class PipelineTrainer:
    """Pipeline-parallel training of ``model`` (a ``Sequential``) on ``comm``'s ranks.

    ``optimizer(params)`` builds each rank's optimizer (clipping by the global norm is
    refused: no rank sees it); ``stages``: see ``_partition``; ``chunks``: model chunks
    per rank (default 2 for interleaved, else 1); ``loss(output, target)`` must be the
    mean over its micro-batch; ``metric(output, target)``: summed over a step's
    micro-batches into ``last_metric``; ``data_parallel``: the ranks holding the same
    stages in other replicas, ``allreduce`` its algorithm. Construction is collective.
    """

    def __init__(
        self,
        model,
        comm,
        *,
        optimizer,
        stages="layers",
        micro_batches=1,
        schedule="1f1b",
        chunks=None,
        loss=F.cross_entropy,
        metric=None,
        data_parallel=None,
        allreduce="auto",
    ):
        chunks = default_chunks(schedule) if chunks is None else chunks
        self._programs = {micro_batches: build(schedule, comm.size, micro_batches, chunks)}
        check_tag_room(micro_batches, chunks)
        self.partition = _partition(model, stages, comm.size * chunks)
        self.micro_batches, self.schedule = micro_batches, schedule
        self.comm = comm.dup()
        self.state_names = list(model.state_dict())
        self.parameter_names = [name for name, _ in model.named_parameters()]
        self.stage_of_layer = [
            k for k, (a, b) in enumerate(self.partition.bounds) for _ in range(a, b)
        ]
        self._broadcast_weights(model)
        self.chunks = [
            build_stage(model, self.partition, stage_of(comm.rank, c, comm.size))
            for c in range(chunks)
        ]
        params = [p for chunk in self.chunks for p in chunk.parameters()]
        serial = {id(p): i for i, p in enumerate(model.parameters())}
        self.serial_indices = [serial[id(p)] for p in params]
        local_optimizer, problem = None, None
        try:
            local_optimizer = optimizer(params) if params else None
            if getattr(local_optimizer, "clip_grad_norm", None) is not None:
                problem = "clip_grad_norm would clip each rank's share of the gradient alone"
        except (TypeError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        problems = [p for p in self.comm.allgather_object(problem) if p]
        if problems:
            raise ValueError(f"PipelineTrainer: the optimizer is refused: {problems[0]}")
        self._stage_optimizer = local_optimizer
        self.data_parallel = data_parallel if data_parallel and data_parallel.size > 1 else None
        if self.data_parallel is not None and local_optimizer is not None:
            local_optimizer = _one_allreduce_per_step(
                local_optimizer, self.data_parallel, allreduce
            )
        self.optimizer = local_optimizer
        self.last_metric = 0.0
        self.executor = PipelineExecutor(
            self.comm, self.chunks, self.optimizer, loss, metric, stash=schedule in ASYNCHRONOUS
        )

    def _broadcast_weights(self, model):
        """Every rank starts from rank 0's parameters and buffers."""
        for tensor in list(model.parameters()) + [b for _, b in model.named_buffers()]:
            xp = backend.get_array_module(tensor.data)
            buffer = xp.ascontiguousarray(tensor.data)
            self.comm.bcast(buffer, root=0)
            tensor.data[...] = buffer

    @property
    def staleness(self):
        """This rank's ``StalenessHistogram`` of the updates so far (all 0 unless PipeDream)."""
        return self.executor.staleness

    def micro_batches_for(self, rows):
        """How many micro-batches a batch of ``rows`` rows runs (fewer when it is short)."""
        if rows >= self.micro_batches:
            return self.micro_batches
        if self.schedule == "interleaved":
            return rows - rows % self.comm.size
        return rows

    def step(self, x, y, global_rows=None):
        """Train on one batch (collective); returns its mean loss on every rank. ``global_rows``:
        with ``data_parallel``, the step's rows over every replica (default: rows x replicas)."""
        if len(x) != len(y):
            raise ValueError(f"step: x has {len(x)} rows but y has {len(y)}")
        m = self.micro_batches_for(len(y))
        if m < 1 and len(y):
            raise ValueError(
                f"step: the interleaved schedule needs at least P = {self.comm.size} rows per "
                f"batch, got {len(y)}; pass more rows or use 1f1b"
            )
        if self.data_parallel is not None and self.optimizer is not None:
            total = len(y) * self.data_parallel.size if global_rows is None else global_rows
            self.optimizer.set_batch_weight(len(y), total)
        for chunk in self.chunks:
            chunk.zero_grad()
        if m == 0:  # an empty share of a short last batch still joins the replicas' average
            self.executor.step_only()
            if self.executor.failure is not None:
                raise self.executor.failure
            self.last_metric = 0.0
            return 0.0
        if m not in self._programs:
            self._programs[m] = build(self.schedule, self.comm.size, m, len(self.chunks))
        inputs, targets = np.array_split(x, m), np.array_split(y, m)
        shares = [len(t) / len(y) for t in targets]
        program = self._programs[m][self.comm.rank]
        loss = self.executor.run(program, inputs, targets, shares)
        return self._finish_step(loss)

    def _finish_step(self, loss):
        """Every rank gets the last stage's loss and metric, and learns whether any stage's
        update was refused (a non-finite averaged gradient): then every rank raises."""
        last_rank = (self.comm.size * len(self.chunks) - 1) % self.comm.size
        failure = self.executor.failure
        everyone = self.comm.allgather_object(
            (loss, self.executor.metric_sum, None if failure is None else str(failure))
        )
        refused = [(rank, text) for rank, (_, _, text) in enumerate(everyone) if text]
        if refused:
            rank, text = refused[0]
            raise failure or ArithmeticError(f"pipeline rank {rank} refused its update: {text}")
        loss, self.last_metric, _ = everyone[last_rank]
        return float(loss)

    def full_state_dict(self):
        """The whole model's state under its serial names, on every rank; collective."""
        local = {}
        for chunk in self.chunks:
            local.update((k, backend.to_numpy(v).copy()) for k, v in chunk.state_dict().items())
        merged = {}
        for part in self.comm.allgather_object(local):
            merged.update(part)
        return OrderedDict((name, merged[name]) for name in self.state_names)

    def state_dict(self):
        """The whole model's state under its serial names on rank 0 (None elsewhere); collective."""
        state = self.full_state_dict()
        return state if self.comm.rank == 0 else None

    def full_optimizer_state(self):
        """The optimizer state of the whole model as a one-process optimizer's ``state_dict``
        holds it (per-parameter state in the model's parameter order), on every rank;
        collective. Every stage has the same hyper-parameters (one schedule drives them)."""
        hyper, local = None, {}
        if self._stage_optimizer is not None:
            state = self._stage_optimizer.state_dict()
            hyper = state["hyper"]
            for index, per_param in zip(self.serial_indices, state["state"]):
                local[index] = {k: np.array(backend.to_numpy(v)) for k, v in per_param.items()}
        merged, hypers = {}, []
        for part_hyper, part in self.comm.allgather_object((hyper, local)):
            merged.update(part)
            hypers.append(part_hyper)
        hyper = next(h for h in hypers if h is not None)
        return {"hyper": hyper, "state": [merged[i] for i in range(len(self.parameter_names))]}

    def optimizer_share(self, whole):
        """This rank's parameters' share of ``whole``, a one-process optimizer's ``state_dict``
        (``full_optimizer_state``'s, a checkpoint's); None when the rank holds no parameters."""
        if len(whole["state"]) != len(self.parameter_names):
            raise ValueError(
                f"the optimizer state holds {len(whole['state'])} parameters, the model has "
                f"{len(self.parameter_names)}; load the state of an optimizer over this model's "
                "parameters"
            )
        if self._stage_optimizer is None:
            return None
        return {"hyper": whole["hyper"], "state": [whole["state"][i] for i in self.serial_indices]}

    def load_optimizer_state(self, whole):
        """Give this rank's optimizer its parameters' share of ``whole``."""
        share = self.optimizer_share(whole)
        if share is not None:
            self._stage_optimizer.load_state_dict(share)


def _one_allreduce_per_step(optimizer, comm, allreduce):
    """``optimizer`` averaging its gradients over ``comm`` in one flat allreduce per step."""
    nbytes = sum(p.data.nbytes for p in optimizer.params)
    return DistributedOptimizer(
        optimizer, comm, allreduce=allreduce, bucket_mb=nbytes / 2**20 + 1, overlap=False
    )
