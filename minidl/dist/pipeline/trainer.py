"""``PipelineTrainer``: train a ``Sequential`` cut into stages over the ranks of a communicator.

    trainer = PipelineTrainer(model, comm, optimizer=lambda ps: optim.SGD(ps, lr=0.1),
                              micro_batches=8, schedule="1f1b")
    loss = trainer.step(x, y)          # on every rank: the batch's mean loss
    state = trainer.state_dict()       # on rank 0: the whole model, serial names

Every rank builds the same model and passes the same batch (stage 0 reads ``x``,
the last stage ``y``); the weights start from rank 0's. One step equals one step
of the serial model on the whole batch (see ``executor.py`` for the loss scaling),
for any schedule and any number of micro-batches.

BatchNorm: statistics are per micro-batch, as GPipe does. Each micro-batch's
forward normalises by its own mean and variance and updates the running
statistics once, in micro-batch order, so with M > 1 a step equals one process
that applies the model to each micro-batch separately and sums the losses scaled
by n_m / N, not one process on the whole batch (``tests/pipeline`` checks both).
"""

from collections import OrderedDict

import numpy as np

from minidl import backend
from minidl import functional as F
from minidl.dist.pipeline.executor import PipelineExecutor, check_tag_room
from minidl.dist.pipeline.schedules import SCHEDULES, build, stage_of
from minidl.dist.pipeline.stages import BALANCE_BY, Partition, build_stage, partition


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
        if stages not in BALANCE_BY:
            raise ValueError(
                f"stages={stages!r}: choose {' or '.join(map(repr, BALANCE_BY))}, "
                "a list of cut points, or a Partition"
            )
        return partition(model, num_stages, by=stages)
    return partition(model, num_stages, by="parameters", cuts=stages)


class PipelineTrainer:
    """Pipeline-parallel training of ``model`` (a ``Sequential``) on ``comm``'s ranks.

    ``optimizer``: a function of a parameter list returning an optimizer (one per
    rank, for its stages; clipping by the global norm is refused, as no rank sees
    it). ``stages``: how to cut (see ``_partition``).
    ``schedule``: one of ``SCHEDULES``; ``chunks``: model chunks per rank (the
    interleaved schedule; 2 by default there, else 1). ``loss(output, target)``
    must be the mean over its micro-batch. Construction is collective.
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
    ):
        if schedule not in SCHEDULES:
            raise ValueError(
                f"unknown pipeline schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}"
            )
        chunks = (2 if schedule == "interleaved" else 1) if chunks is None else chunks
        self.programs = build(schedule, comm.size, micro_batches, chunks)
        check_tag_room(micro_batches, chunks)
        self.partition = _partition(model, stages, comm.size * chunks)
        self.micro_batches, self.schedule = micro_batches, schedule
        self.comm = comm.dup()
        self._names = list(model.state_dict())
        self._broadcast_weights(model)
        self.chunks = [
            build_stage(model, self.partition, stage_of(comm.rank, c, comm.size))
            for c in range(chunks)
        ]
        params = [p for chunk in self.chunks for p in chunk.parameters()]
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
        self.optimizer = local_optimizer
        self.executor = PipelineExecutor(self.comm, self.chunks, self.optimizer, loss)

    def _broadcast_weights(self, model):
        """Every rank starts from rank 0's parameters and buffers."""
        for tensor in list(model.parameters()) + [b for _, b in model.named_buffers()]:
            xp = backend.get_array_module(tensor.data)
            buffer = xp.ascontiguousarray(tensor.data)
            self.comm.bcast(buffer, root=0)
            tensor.data[...] = buffer

    @property
    def program(self):
        """This rank's instruction list."""
        return self.programs[self.comm.rank]

    def step(self, x, y):
        """Train on one batch (collective); returns its mean loss on every rank."""
        if len(x) != len(y):
            raise ValueError(f"step: x has {len(x)} rows but y has {len(y)}")
        if len(y) < self.micro_batches:
            raise ValueError(
                f"step: a batch of {len(y)} rows cannot make {self.micro_batches} micro-batches; "
                f"pass at least {self.micro_batches} rows or fewer micro-batches"
            )
        inputs = np.array_split(x, self.micro_batches)
        targets = np.array_split(y, self.micro_batches)
        shares = [len(t) / len(y) for t in targets]
        for chunk in self.chunks:
            chunk.zero_grad()
        loss = self.executor.run(self.program, inputs, targets, shares)
        last_rank = (self.comm.size * len(self.chunks) - 1) % self.comm.size
        return float(self.comm.bcast_object(loss, root=last_rank))

    def state_dict(self):
        """The whole model's state under its serial names on rank 0 (None elsewhere); collective."""
        local = {}
        for chunk in self.chunks:
            local.update((k, backend.to_numpy(v).copy()) for k, v in chunk.state_dict().items())
        merged = {}
        for part in self.comm.allgather_object(local):
            merged.update(part)
        if self.comm.rank != 0:
            return None
        return OrderedDict((name, merged[name]) for name in self._names)
