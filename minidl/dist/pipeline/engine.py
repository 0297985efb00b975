"""``PipelineEngine``: one epoch of ``minidl train --grid [dp=D,]pp=P`` on this rank.

The ranks form a grid (``grid.py``): each of the D replicas is a pipeline of P
ranks (``PipelineTrainer`` over the ``pp`` group) that trains on its share of
the global batch, and the ranks holding the same stage average their gradients
over the ``dp`` group once per step. After each epoch every rank gathers the
whole model and optimizer state from its pipeline, so evaluation and the
checkpoint (rank 0's, under the serial run's names and parameter order) see the
run as one process would, and a checkpoint resumes on any layout.

With ``tp=T`` too (``--grid [dp=D,]pp=P,tp=T``), the pipeline's layers are
``TensorParallel``'s (the rule of ``tensor/placement.py`` over the ``tp`` group)
and each rank of a stage sends its block of a split activation to the rank of
the next stage with the same tp coordinate; the epoch's end gathers the blocks
into the serial model and state (``TensorParallel.gather``/``gather_state``).
"""

import math
import time
from collections import Counter

import numpy as np

from ...backend import to_device, to_numpy
from ...data import DataLoader
from ...perf.pipeline_timeline import PipelineTimeline
from ...train.config import ConfigError, option
from ...train.engine import Diverged
from ...train.setup import augmentation, make_optimizer
from ..engines import _DistributedEngine, run_callbacks
from ..grid import Grid
from ..telemetry import StalenessHistogram
from ..tensor import PlacementError, TensorParallel
from .schedules import ASYNCHRONOUS
from .trainer import PipelineTrainer


def correct_predictions(output, labels):
    """How many rows of ``output`` have their largest value at the row's label."""
    return int((to_numpy(output.argmax(axis=1)) == labels).sum())


class WholeOptimizerState:
    """What the checkpoint keeps of a pipeline's optimizer: the whole run's state as one
    process's optimizer holds it. ``gather()`` (collective, at an epoch's end) collects it
    for ``state_dict()``; ``load_state_dict(state)`` gives each rank its stages' share
    (through ``tensor``, a ``TensorParallel``, where the layers are split over tp)."""

    def __init__(self, trainer, tensor=None):
        self.trainer, self.tensor, self._state = trainer, tensor, None

    def gather(self):
        self._state = self.trainer.full_optimizer_state()
        if self.tensor is not None:
            self._state = self.tensor.gather_state(self._state)

    def state_dict(self):
        return self._state

    def load_state_dict(self, state):
        if self.tensor is not None:
            state = self.tensor.scatter_state(state)
        self.trainer.load_optimizer_state(state)


class PipelineEngine(_DistributedEngine):
    """This rank's stages of the pipeline and its replica's share of each batch."""

    progress_rank = 0

    def __init__(self, config, options, comm, model, train_set):
        self.config, self.options, self.comm, self.model = config, options, comm, model
        shape = options.grid
        self.grid = Grid(comm, dp=shape.dp, pp=shape.pp, tp=shape.tp)
        self.replicas = self.grid.group("dp")
        self.tensor = self._split_over_tp(model)
        self.callbacks = run_callbacks(options, comm, config.seed)
        plain = []

        def optimizer(params):
            plain.append(make_optimizer(config, params))
            return plain[-1]

        layers = self.tensor.module if self.tensor else model
        self.trainer = PipelineTrainer(
            layers, self.grid.group("pp"), optimizer=optimizer, stages="layers",
            micro_batches=options.micro_batches, schedule=options.schedule,
            chunks=options.chunks, metric=correct_predictions,
            data_parallel=self.replicas, allreduce=options.allreduce,
        )  # fmt: skip
        self.optimizer = self.trainer.optimizer
        self.schedulable = plain[0] if plain else None  # None: a stage without parameters
        self.checkpoint_optimizer = WholeOptimizerState(self.trainer, self.tensor)
        self.loader = DataLoader(
            train_set, config.batch_size, shuffle=True, seed=config.seed, drop_last=False,
            rank=self.replicas.rank, world_size=self.replicas.size,
            transform=augmentation(config),
        )  # fmt: skip
        self._check_last_batch()
        if comm.rank == 0:
            part = self.trainer.partition
            stages = " ".join(f"{a}-{b - 1}" for a, b in part.bounds)
            print(
                f"pipeline: {options.schedule}, {options.micro_batches} micro-batches, "
                f"stages (layers) {stages}, balance {part.balance:.2f} by {part.by}",
                flush=True,
            )

    def _split_over_tp(self, model):
        """``TensorParallel`` over the tp group (None without one); the rule's layout only, as
        a pipeline stage runs its layers one by one (one-weird-trick's batch blocks would not)."""
        shape = self.grid.shape
        if shape.tp == 1:
            return None
        if self.options.tp_layout != "rule":
            raise ConfigError(
                f"{option('grid')} {shape}: a pipeline splits its layers over tp by the rule; "
                f"drop {option('tp_layout')} {self.options.tp_layout}"
            )
        try:
            return TensorParallel(model, self.grid.group("tp"))
        except PlacementError as exc:
            raise ConfigError(f"{option('grid')} {shape}: {exc}") from None

    def _check_last_batch(self):
        """The interleaved schedule needs P rows in each replica's share of the last batch."""
        if self.options.schedule != "interleaved":
            return
        steps = len(self.loader)
        rows = len(self.loader.rank_indices(0)[steps - 1]) if steps else 0
        pp = self.grid.shape.pp
        if 0 < rows < pp:
            raise ConfigError(
                f"the last batch leaves {rows} rows to a replica, fewer than the interleaved "
                f"schedule's P = {pp}: change {option('subset')} or {option('batch_size')}, "
                "or use 1f1b"
            )

    def distribute(self):
        """Nothing to wrap: the trainer averages over the data-parallel group itself; with tp,
        each rank takes its blocks of the (maybe resumed) serial model."""
        if self.tensor is not None:
            self.tensor.scatter()

    def timeline(self):
        """What ``--trace`` records: every rank's instructions (``timeline.py``)."""
        return PipelineTimeline(self.trainer.executor, self.comm.rank)

    def evaluated(self):
        """Nothing to restore: every rank already holds the whole model."""

    def record(self):
        """The options, and as ``world_size`` the replicas: the ranks sharing a step's samples."""
        return super().record() | {"world_size": self.grid.shape.dp}

    def train(self, epoch, progress):
        self.loader.set_epoch(epoch - 1)
        self.model.train()
        lr = self.schedulable.lr if self.schedulable is not None else self.config.lr
        dtype = next(self.model.parameters()).dtype
        loss_sum = correct = seen = 0.0
        stale_before = Counter(self.trainer.staleness.counts)
        start = time.perf_counter()
        for step, (x, y) in enumerate(self.loader):
            for callback in self.callbacks:
                callback.before_step(step, len(y))
            x = to_device(x, self.config.device).astype(dtype, copy=False)
            try:
                loss = self.trainer.step(x, y, self.loader.global_batch_size(step))
            except ArithmeticError as exc:
                raise Diverged(f"epoch {epoch}, step {step}: {exc}") from None
            if not math.isfinite(loss):
                raise Diverged(f"epoch {epoch}, step {step}: the loss is {loss}")
            for callback in self.callbacks:
                callback.after_step(f"epoch {epoch}, step {step}")
            loss_sum += loss * len(y)
            correct += self.trainer.last_metric
            seen += len(y)
        seconds = time.perf_counter() - start
        totals = np.array([loss_sum, correct, seen], dtype=np.float64)
        self.replicas.allreduce(totals, op="sum")
        loss_sum, correct, seen = totals
        if self.tensor is None:
            self.model.load_state_dict(self.trainer.full_state_dict())
        else:
            self.tensor.module.load_state_dict(self.trainer.full_state_dict())
            self.tensor.gather()
        self.checkpoint_optimizer.gather()
        stats = {
            "loss": loss_sum / max(seen, 1), "acc": correct / max(seen, 1),
            "images": int(seen), "seconds": seconds, "images_per_s": seen / seconds,
        }  # fmt: skip
        records = []
        if self.options.schedule in ASYNCHRONOUS:
            records = self._staleness_records(epoch, stale_before)
        return stats, lr, records

    def _staleness_records(self, epoch, before):
        """Rank 0: the epoch's ``"dist"`` record of staleness (collective; [] elsewhere)."""
        counts = dict(Counter(self.trainer.staleness.counts) - before)
        everyone = self.comm.allgather_object((self.grid.coords["pp"], counts))
        if self.comm.rank != 0:
            return []
        stages = [StalenessHistogram() for _ in range(self.grid.shape.pp)]
        for stage, part in everyone:
            stages[stage].merge(StalenessHistogram(part))
        total = StalenessHistogram()
        for histogram in stages:
            total.merge(histogram)
        return [
            {
                "kind": "dist", "epoch": epoch, "mode": self.options.schedule,
                "updates": total.count, "staleness": total.to_dict(),
                "stage_staleness_mean": [h.mean for h in stages],
            }
        ]  # fmt: skip

    def format_record(self, summary):
        """One console line of a PipeDream epoch's staleness."""
        stale = summary["staleness"]
        stages = " ".join(f"{mean:.2f}" for mean in summary["stage_staleness_mean"])
        return (
            f"  {summary['mode']}: {summary['updates']} updates, staleness mean "
            f"{stale['mean']:.2f} max {stale['max']} (per stage {stages})"
        )
