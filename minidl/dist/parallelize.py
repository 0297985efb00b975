"""What each rank trains in a distributed run, as ``minidl train --dist``, ``--grid`` and
``--workers`` ask, for the one loop of every layout (``train.loop.train_epochs``).

``parallelize`` applies the process grid to the run's serial model as a ladder of wrappers
(hybrid parallelism, Ben-Nun & Hoefler 2019, §5.4): tensor or spatial parallelism puts this
rank's blocks of each layer in its place, a pipeline cuts the model into this rank's stages
(its schedule is the loop's step), and data parallelism wraps the optimizer so that every
update averages the gradients of the replicas. A consistency model (bsp, ssp:S, asp, avg:H,
easgd) gives the loop a worker's optimizer and loader instead, and its epoch instead of a
plain one. What a layout adds between steps and epochs are loop callbacks, below.
Recomputation (``--recompute N``) cuts the serial model into N segments (``build_model``),
tensor parallelism's blocks the same way, and a pipeline's stages cut them at their bounds.
"""

import dataclasses
import sys
from collections import Counter

import numpy as np

from ..autograd import Tensor
from ..backend import to_device, to_numpy
from ..layers import Module, leaves
from ..perf.halo_cost import SplitError
from ..perf.pipeline_timeline import PipelineTimeline
from ..perf.telemetry import (
    StalenessHistogram,
    describe_session,
    describe_staleness,
    summarize_epoch,
)
from ..perf.tensor_volume import gradient_bytes, tensor_volume
from ..train.callbacks import Callback, Diverged, NonFiniteLossError, SampleKeys
from ..train.config import ConfigError, augmentation, make_optimizer, option, recomputed
from ..train.loop import Training
from ..train.memory_record import MemoryRecord
from .compression import CompressedOptimizer
from .consistency import global_train_stats, make_session
from .consistency.ps import TrainingAborted
from .data_parallel import DistributedOptimizer
from .grid import Grid
from .pipeline import PipelineTrainer
from .pipeline.cut import cut_stages
from .pipeline.schedules import ASYNCHRONOUS, default_chunks
from .pipeline.shares import PipelineShares
from .spatial import local_rows, plan_rows, spatial_parallel, step_bytes
from .straggler import Straggler
from .sync_batchnorm import sync_for_training
from .tensor import TRAFFIC, PlacementError, TensorParallel, one_weird_trick_plan, tail_plan
from .zero import ZeroOptimizer
from .zero_layers import WholeModelBetweenEpochs


def parallelize(run, options, plan=None):
    """What this rank of ``run`` trains under ``options``: the ladder of the module doc.
    ``plan``: tensor parallelism's word per layer (None: ``options.tp_layout``'s)."""
    config, comm = run.config, run.comm
    if options.mode.name != "sync":
        return consistency_training(run, options)
    shape = options.grid
    grid = None  # data parallelism alone (--dist sync, --grid dp=N): every rank a replica
    if shape is not None and shape.size != shape.dp:
        grid = Grid(comm, **dataclasses.asdict(shape))
    dp = grid.group("dp") if grid is not None else comm
    callbacks = run_callbacks(run, options)
    if grid is not None and shape.pp > 1:
        return pipeline_training(run, options, grid, callbacks)
    placement, model = None, run.model
    if options.sync_bn:  # before the placement: its layers (and the optimizer) keep these
        sync_for_training(model, dp, len(run.train_set), config.batch_size)
    loader = run.loader(run.train_set, config.batch_size, dp.rank, dp.size, train=True)
    if grid is not None:
        if plan is None and options.tp_layout == "one-weird-trick":
            plan = one_weird_trick_plan(model)
        height = run.train_set[0][0].shape[-2]
        placement = place_on_grid(model, grid, plan, height, options.sync_bn)
        model = recomputed(placement.module, config.recompute)
    optimizer = make_optimizer(config, model.parameters())
    callbacks.append(SampleKeys(loader))
    averaged = optimizer
    if grid is None or dp.size > 1:
        averaged = data_parallel(optimizer, dp, options, model, config.seed)
        callbacks.insert(0, BatchWeighting(averaged, loader, dp))
        if options.zero == 3:  # evaluation and the checkpoint read the model whole
            callbacks.append(WholeModelBetweenEpochs(averaged))
    if options.compressed:
        callbacks.append(CompressionRecord(averaged))
    callbacks.append(MemoryRecord(model, averaged, comm))
    record = options.record()
    if placement is not None:
        sample = run.train_set[0][0].shape
        callbacks.append(GridTraffic(grid, placement, averaged, run.model, loader, sample))
        record["plan"] = placement.plan
    return Training(
        model,
        averaged,
        loader,
        callbacks=callbacks,
        comm=dp if placement is not None else comm,
        schedulable=optimizer,
        placement=placement,
        options=record | ({"world_size": dp.size} if placement is not None else {}),
    )


def data_parallel(optimizer, comm, options, model, seed=0):
    """``optimizer`` averaging its gradients over ``comm``: in buckets during backward, sharded
    (``options.zero``) or compressed (``options.compressor``)."""
    if options.zero:
        return ZeroOptimizer(
            optimizer,
            comm,
            stage=options.zero,
            allreduce=options.allreduce,
            bucket_mb=options.bucket_mb,
            model=model,
        )
    if options.compressed:
        return CompressedOptimizer(
            optimizer,
            comm,
            options.compressor,
            error_feedback=options.error_feedback,
            seed=seed,
            allreduce=options.allreduce,
            model=model,
        )
    return DistributedOptimizer(
        optimizer,
        comm,
        allreduce=options.allreduce,
        bucket_mb=options.bucket_mb,
        overlap=options.overlap,
        model=model,
    )


class RowBlocks(Module):
    """``SpatialParallel`` fed with this rank's rows of each whole batch the loader gives."""

    def __init__(self, spatial, group):
        super().__init__()
        self.spatial, self.group = spatial, group

    def forward(self, x):
        return self.spatial(Tensor(local_rows(x.data, self.group)))


class GridPlacement:
    """A model placed on a tensor and/or spatial grid (``Training.placement``): ``module``
    is what this rank trains; evaluation runs ``evaluated`` on ``replicas``' shares of the
    test set; the checkpoint streams the serial model's state (``model_state``) and its
    optimizer's (``optimizer_state``) from the ``tensor`` blocks, made whole one at a time,
    and ``scatter_state`` takes this rank's blocks of a one-process optimizer state. A
    spatial grid's parameters are the serial model's own: nothing to gather."""

    def __init__(self, module, evaluated, replicas, plan, tensor=None):
        self.module, self.evaluated, self.replicas = module, evaluated, replicas
        self.plan, self.tensor = plan, tensor

    def model_state(self):
        return self.tensor.state_items() if self.tensor else self.evaluated.state_dict().items()

    def optimizer_state(self, state_dict):
        if self.tensor is None:
            return state_dict
        names = [name for name, _ in self.tensor.module.named_parameters()]
        states = self.tensor.blocks.whole_states(names, state_dict["state"])
        return {**state_dict, "state": states}

    def scatter_state(self, state_dict):
        return state_dict if self.tensor is None else self.tensor.scatter_state(state_dict)


class SpatialTensorPlacement(GridPlacement):
    """Spatial x tensor parallelism: the conv/pool front split over image rows on the spatial
    group, the layers after it split by ``TensorParallel``'s rule (or ``plan_words``) on the
    tp group.

    Every rank of a tp group computes the same front on the same rows; the tail's first
    split layer takes a replicated input, so the gradient it returns to the front is whole
    on every tp rank. The tail runs on the gathered activation, the same on every rank of a
    spatial group: each rank's gradients are the serial ones (or their blocks). Evaluation
    runs the tensor-parallel model on whole images, one tp group per share of the test set.
    """

    def __init__(self, model, grid, height, plan_words=None):
        rows, tp = grid.group("spatial"), grid.group("tp")
        _, front, _ = plan_rows(model, height, rows.size)
        if plan_words is None:
            plan_words = tail_plan(model, front, tp.size)
        elif any(plan_words[:front]):
            raise PlacementError(
                f"the first {front} layers run split over image rows (spatial); give them the "
                "word '' and split only the layers after them over tp"
            )
        tensor = TensorParallel(model, tp, plan_words)
        module = RowBlocks(spatial_parallel(tensor.module, rows, height), rows)
        replicas = grid.world.split(grid.coords["tp"], grid.world.rank)
        super().__init__(module, tensor.module, replicas, tensor.plan, tensor)


def place_on_grid(model, grid, plan, height, sync_bn=False):
    """``model`` split over the tp axis by ``TensorParallel``, over image rows on the spatial
    one, or both (``SpatialTensorPlacement``), as a ``GridPlacement``; a layout that cannot
    run raises ``ConfigError`` in one line saying what would fit. The batch norms before a
    spatial split's tail join their replica's blocks, and (``sync_bn``) every replica's."""
    shape = grid.shape
    if shape.pp > 1:
        raise ConfigError(
            f"{option('grid')} {shape}: pipeline grids (pp) train in minidl.dist.pipeline's "
            "stages (with dp and tp), not on this placement"
        )
    try:
        if shape.spatial == 1:
            tensor = TensorParallel(model, grid.group("tp"), plan)
            return GridPlacement(
                tensor.module, tensor.module, grid.group("dp"), tensor.plan, tensor
            )
        if shape.tp == 1:
            rows = grid.group("spatial")
            statistics = grid.world if sync_bn else rows
            module = RowBlocks(spatial_parallel(model, rows, height, statistics=statistics), rows)
            return GridPlacement(module, model, grid.world, ["spatial"])
        return SpatialTensorPlacement(model, grid, height, plan)
    except (PlacementError, SplitError) as exc:
        raise ConfigError(f"{option('grid')} {shape}: {exc}") from None


def split_over_tp(model, grid, options):
    """A pipeline's layers split over the tp group by the rule (None without one): a stage runs
    its layers one by one, which one-weird-trick's blocks of the batch would not."""
    shape = grid.shape
    if shape.tp == 1:
        return None
    if options.tp_layout != "rule":
        raise ConfigError(
            f"{option('grid')} {shape}: a pipeline splits its layers over tp by the rule; "
            f"drop {option('tp_layout')} {options.tp_layout}"
        )
    try:
        return TensorParallel(model, grid.group("tp"))
    except PlacementError as exc:
        raise ConfigError(f"{option('grid')} {shape}: {exc}") from None


def pipeline_training(run, options, grid, callbacks):
    """This rank's stages of a ``[dp=D,]pp=P[,tp=T]`` pipeline, its replica's share of each
    batch; the replicas' gradients averaged once a step over the dp group."""
    config, dp = run.config, grid.group("dp")
    tensor = split_over_tp(run.model, grid, options)
    layers = run.model if tensor is None else recomputed(tensor.module, config.recompute)
    blocks = None if tensor is None else tensor.blocks
    del tensor  # from here on this rank holds its stages' layers alone (see ``begin``)
    optimizers = []

    def optimizer(params):
        optimizers.append(make_optimizer(config, params))
        return optimizers[-1]

    trainer = PipelineTrainer(
        layers,
        grid.group("pp"),
        optimizer=optimizer,
        stages=stage_cut(run, options, dp.size),
        micro_batches=options.micro_batches,
        schedule=options.schedule,
        chunks=options.chunks,
        metric=correct_predictions,
        data_parallel=dp,
        allreduce=options.allreduce,
    )
    loader = run.loader(run.train_set, config.batch_size, dp.rank, dp.size, train=True)
    check_last_batch(loader, options.schedule, grid.shape.pp)
    steps = PipelineSteps(trainer, loader, run.comm, config.device, config.dtype)
    callbacks += [SampleKeys(loader), steps, MemoryRecord(None, trainer.optimizer, run.comm)]
    if run.rank == 0:
        part = trainer.partition
        stages = " ".join(f"{a}-{b - 1}" for a, b in part.bounds)
        print(
            f"pipeline: {options.schedule}, {options.micro_batches} micro-batches, "
            f"stages (layers) {stages}, balance {part.balance:.2f} by {part.by}",
            flush=True,
        )
    shares = PipelineShares(trainer, dp, blocks)
    return Training(
        shares.evaluated,
        trainer.optimizer,
        loader,
        step=steps,
        callbacks=callbacks,
        comm=dp,
        schedulable=optimizers[0] if optimizers else None,  # None: a stage without parameters
        placement=shares,
        options=options.record() | {"world_size": grid.shape.dp},
        describe=describe_staleness,
        timeline=lambda: PipelineTimeline(trainer.executor, run.rank),
    )


def stage_cut(run, options, replicas):
    """The ``Partition`` ``options.stages`` makes of ``run``'s serial model (by memory: for a
    replica's share of a batch)."""
    schedule = options.schedule
    return cut_stages(
        run.model,
        options.stages,
        options.grid.pp,
        run.train_set[0][0].shape,
        -(-run.config.batch_size // replicas),
        chunks=options.chunks or default_chunks(schedule),
        micro_batches=options.micro_batches,
        schedule=schedule,
        optimizer=run.config.optimizer,
    )


def correct_predictions(output, labels):
    """How many rows of ``output`` have their largest value at the row's label."""
    return int((to_numpy(output.argmax(axis=1)) == labels).sum())


def check_last_batch(loader, schedule, pp):
    """The interleaved schedule needs P rows in each replica's share of the last batch."""
    if schedule != "interleaved":
        return
    steps = len(loader)
    rows = len(loader.rank_indices(0)[steps - 1]) if steps else 0
    if 0 < rows < pp:
        raise ConfigError(
            f"the last batch leaves {rows} rows to a replica, fewer than the interleaved "
            f"schedule's P = {pp}: change {option('subset')} or {option('batch_size')}, "
            "or use 1f1b"
        )


class PipelineSteps(Callback):
    """The loop's step of a pipeline: ``trainer.step`` on the batch (cast to the model's
    dtype and device), its loss and correct predictions; PipeDream's staleness per epoch."""

    def __init__(self, trainer, loader, world, device, dtype):
        self.trainer, self.loader, self.world = trainer, loader, world
        self.device, self.dtype = device, dtype
        self.epoch, self.index, self.stale_before = 0, 0, Counter()

    def before_epoch(self, epoch):
        self.epoch = epoch
        if self.trainer.schedule in ASYNCHRONOUS:
            self.stale_before = Counter(self.trainer.staleness.counts)

    def before_step(self, step, batch_size):
        self.index = step

    def __call__(self, x, y):
        x = to_device(x, self.device).astype(self.dtype, copy=False)
        where = f"epoch {self.epoch}, step {self.index}"
        try:
            loss = self.trainer.step(x, y, self.loader.global_batch_size(self.index))
        except ArithmeticError as exc:
            raise Diverged(f"{where}: {exc}") from None
        if not np.isfinite(loss):
            raise Diverged(f"{where}: the loss is {loss}")
        return loss, self.trainer.last_metric

    def after_epoch(self, epoch, stats):
        """Rank 0: the epoch's ``"dist"`` record of staleness (collective; [] elsewhere)."""
        if self.trainer.schedule not in ASYNCHRONOUS:
            return []
        comm = self.world
        counts = dict(Counter(self.trainer.staleness.counts) - self.stale_before)
        everyone = comm.allgather_object((self.trainer.comm.rank, counts))
        if comm.rank != 0:
            return []
        stages = [StalenessHistogram() for _ in range(self.trainer.comm.size)]
        for stage, part in everyone:
            stages[stage].merge(StalenessHistogram(part))
        total = StalenessHistogram()
        for histogram in stages:
            total.merge(histogram)
        return [
            {
                "kind": "dist",
                "epoch": epoch,
                "mode": self.trainer.schedule,
                "updates": total.count,
                "staleness": total.to_dict(),
                "stage_staleness_mean": [h.mean for h in stages],
            }
        ]


def consistency_training(run, options):
    """This rank's role in a consistency session (bsp / ssp:S / asp / avg:H / easgd): a
    server serves, a worker trains with the session's optimizer and loader."""
    config, comm = run.config, run.comm
    session = make_session(
        options,
        comm,
        run.model,
        lambda params: make_optimizer(config, params),
        seed=config.seed,
        progress=run.progress,
    )
    servers = session.layout.servers if options.mode.uses_server else 0
    epochs = SessionEpochs(session, options.mode.text, comm)
    callbacks = run_callbacks(run, options, servers)
    transform = augmentation(config)
    loader = session.train_loader(run.train_set, config.batch_size, config.seed, transform)
    return Training(
        run.model,
        session.optimizer,
        loader,
        callbacks=[*callbacks, epochs],
        schedulable=session.schedulable,
        checkpoints_optimizer=False,  # the state lives on the servers, sharded
        around_epoch=epochs.around,
        options=options.record(),
        describe=describe_session,
        progress_rank=servers,  # the first worker
    )


class SessionEpochs(Callback):
    """A consistency session's epoch around the loop's: a server serves while the workers
    train; then (collective) every rank learns whether anyone stopped, the model holds the
    consensus for evaluation, and rank 0 summarises every rank's counters."""

    def __init__(self, session, mode, comm):
        self.session, self.mode, self.comm = session, mode, comm
        self.epoch, self.summary = 0, []

    def before_epoch(self, epoch):
        self.epoch = epoch

    def around(self, train):
        schedulable = self.session.schedulable
        lr = schedulable.lr if schedulable else None

        def guarded():
            try:
                return train()
            except NonFiniteLossError as exc:
                print(f"minidl train (rank {self.comm.rank}): {exc}", file=sys.stderr, flush=True)
                raise TrainingAborted(str(exc)) from exc

        stats, stopped = self.session.run_epoch(guarded)
        records = self.session.finish_epoch(stats, stopped, lr)
        if records is None:
            raise Diverged(
                f"epoch {self.epoch}: a worker's loss was not finite; training stopped on every "
                f"rank. Lower {option('lr')}, or clip gradients"
            )
        self.summary = []
        if self.comm.rank != 0:
            return stats or {}
        stats = global_train_stats(records)
        stats["lr"] = next(r["lr"] for r in records if r.get("lr") is not None)
        self.summary = [
            {"epoch": self.epoch, **summarize_epoch(self.mode, records, stats["images"])}
        ]
        return stats

    def after_epoch(self, epoch, stats):
        return self.summary

    def after_evaluation(self):
        self.session.restore_local()

    def close(self):
        self.session.close()


class BatchWeighting(Callback):
    """Weigh each rank's gradient by its share of the global batch (uneven last batches).

    A loader that skips unreadable images may hand a rank fewer than its share: then the
    ranks sum the images they actually use (one allreduce of a number per step), so that
    the averaged gradient is the mean over those images, as in one process."""

    def __init__(self, optimizer, loader, comm):
        self.optimizer, self.loader, self.comm = optimizer, loader, comm

    def before_step(self, step, batch_size):
        total = self.loader.global_batch_size(step)
        if getattr(self.loader, "skip_unreadable", False):
            used = np.array([batch_size], dtype=np.float64)
            total = int(self.comm.allreduce(used, op="sum")[0])
        self.optimizer.set_batch_weight(batch_size, total)


class CompressionRecord(Callback):
    """The epoch's ``"compression"`` record of a compressed optimizer."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def after_epoch(self, epoch, stats):
        return [self.optimizer.compression_record(epoch)]


SPATIAL_BYTES = ("halo_bytes", "gather_bytes", "grad_bytes")


class GridTraffic(Callback):
    """The epoch's ``"grid"`` record: the bytes each rank moved over tp and dp (and on a
    spatial grid its halos, gather and window gradients), beside what ``perf.tensor_volume``
    and ``spatial.step_bytes`` predict for the steps it trained (collective; a spatial
    group's predicted bytes are shared evenly among its ranks). The prediction per batch
    size is worked out here, from the ``serial`` model's shapes."""

    def __init__(self, grid, placement, optimizer, serial, loader, sample_shape):
        self.grid, self.placement, self.optimizer = grid, placement, optimizer
        self.steps, self.before, self.reduced = Counter(), {}, 0
        plan, tp = placement.plan, grid.shape.tp
        if plan == ["spatial"]:  # its layers count their own bytes
            plan = [""] * len(leaves(serial))
        itemsize = next(iter(serial.parameters())).dtype.itemsize
        self.grads = gradient_bytes(serial, plan, tp, grid.coords["tp"], itemsize)
        most = -(-loader.global_batch // loader.world_size)  # a rank's largest share of a batch
        self.volume = [
            sum(tensor_volume(serial, plan, sample_shape, rows, tp, itemsize).values())
            for rows in range(most + 1)
        ]
        spatial = getattr(placement.module, "spatial", None)  # its layers count what they send
        self.counters, self.counted = (spatial.counters if spatial else None), 0
        self.halo = None  # a spatial group's bytes a step: halos, the gather, window gradients
        if spatial is not None:
            parts = grid.shape.spatial
            self.halo = [0] + [
                sum(step_bytes(serial, (rows, *sample_shape), parts, itemsize).values())
                for rows in range(1, most + 1)
            ]

    def before_epoch(self, epoch):
        self.steps.clear()
        self.before = dict(TRAFFIC)

    def before_step(self, step, batch_size):
        self.steps[batch_size] += 1

    def after_epoch(self, epoch, stats):
        sent = {k: v - self.before.get(k, 0) for k, v in TRAFFIC.items()}
        dp = self.grid.group("dp")
        reduced = self.optimizer.stats["bytes_reduced"] if dp.size > 1 else 0
        dp_bytes, self.reduced = reduced - self.reduced, reduced
        predicted = {
            "tp_predicted": sum(n * self.volume[rows] for rows, n in self.steps.items()),
            "dp_predicted": self.grads * self.steps.total() if dp.size > 1 else 0,
        }
        mine = {"tp": sum(sent.values()), "dp": dp_bytes} | predicted
        if self.counters is not None:
            counted = sum(self.counters.get(k, 0) for k in SPATIAL_BYTES)
            group = sum(n * self.halo[rows] for rows, n in self.steps.items())
            mine |= {
                "spatial": counted - self.counted,
                "spatial_predicted": group / self.grid.shape.spatial,
            }
            self.counted = counted
        counts = self.grid.world.allgather_object(mine)
        record = {
            "kind": "grid",
            "epoch": epoch,
            "grid": str(self.grid.shape),
            "plan": self.placement.plan,
            "steps": self.steps.total(),
        }
        for key in counts[0]:
            record[f"{key}_bytes"] = [c[key] for c in counts]
        return [record]


def run_callbacks(run, options, servers=0):
    """The run's watchdogs and this rank's straggler, as ``options`` asks (``servers``: the
    ranks before the first worker); checks the ranks named."""
    comm = run.comm
    for rank in options.stragglers:
        if not servers <= rank < comm.size:
            raise ConfigError(
                f"{option('straggler')} {rank}:{options.stragglers[rank]}: rank {rank} is not "
                f"a worker; workers are ranks {servers}..{comm.size - 1}"
            )
    callbacks = run.watchdogs(options)
    if options.stragglers or options.jitter:
        callbacks.append(Straggler(comm.rank, options.stragglers, options.jitter, run.config.seed))
    return callbacks
