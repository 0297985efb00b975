"""Data x tensor (or x spatial, or x spatial x tensor) parallelism on a process grid
(``--grid dp=D,tp=T``, ``dp=D,spatial=S`` or ``dp=D,spatial=S,tp=T``): the engine of ``fit``.

The ranks form a ``Grid``; each tensor-parallel group (T neighbouring ranks)
holds one replica of the model, its layers split by ``TensorParallel``'s rule
(or the ``plan`` given), and the D replicas train on different shards of the
data: ``--batch-size`` is per replica, so a step sees D * batch-size samples,
and the gradients of each block are averaged over the data-parallel group (the
ranks holding the same block), as ``--dist sync`` does over all ranks. With
equal shards this is minibatch SGD on the serial model with batch D * b. With
``spatial=S`` in place of ``tp``, each replica is split over image rows instead
(``minidl.dist.spatial``), every rank holding the whole weights. With both, the
conv/pool front is split over rows and the fully connected tail over tp
(``SpatialTensorPlacement``): a replica is S * T ranks.

The serial model stays on every rank: after each epoch the blocks are gathered
into it (weights and optimizer state), so evaluation, the checkpoint, ``minidl
eval`` and ``--resume`` on any grid see the model of a serial run, with the
same names and shapes; a resume takes each rank's blocks from it.
"""

from collections import Counter

from ..autograd import Tensor
from ..layers import Module
from ..perf.halo_cost import SplitError
from ..perf.tensor_volume import gradient_bytes, leaves, tensor_volume
from ..train.callbacks import Callback
from ..train.config import ConfigError, option
from ..train.engine import LocalEngine
from ..train.setup import make_optimizer
from .data_parallel import DistributedOptimizer
from .engines import BatchWeighting, _DistributedEngine, run_callbacks
from .grid import Grid
from .spatial import local_rows, plan_rows, spatial_parallel
from .tensor import TRAFFIC, PlacementError, TensorParallel, one_weird_trick_plan, tail_plan


class BatchSizes(Callback):
    """How many steps had each local batch size on this rank (``steps``, cleared each epoch)."""

    def __init__(self):
        self.steps = Counter()

    def before_step(self, step, batch_size):
        self.steps[batch_size] += 1


class RowBlocks(Module):
    """``SpatialParallel`` fed with this rank's rows of each whole batch the loader gives."""

    def __init__(self, spatial, group):
        super().__init__()
        self.spatial, self.group = spatial, group

    def forward(self, x):
        return self.spatial(Tensor(local_rows(x.data, self.group)))


class SpatialPlacement:
    """A spatial-parallel model on the grid: its parameters are the serial model's own, so
    there is nothing to gather or scatter (``TensorParallel``'s face, with no blocks)."""

    plan = ["spatial"]

    def __init__(self, model, group, height):
        self.serial = model
        self.module = RowBlocks(spatial_parallel(model, group, height), group)

    def gather(self):
        pass

    scatter = gather

    def gather_state(self, state_dict):
        return state_dict

    scatter_state = gather_state


class SpatialTensorPlacement:
    """Spatial x tensor parallelism: the conv/pool front split over image rows on the spatial
    group, the tail (from the first layer after the front, e.g. the ``Flatten`` and the fully
    connected layers) split by ``TensorParallel``'s rule on the tp group.

    Every rank of a tp group computes the same front on the same rows (replicated work); the
    tail's first split layer takes a replicated input, so the gradient it returns to the
    front is whole on every tp rank, and the front's weights get the same gradient there. The
    tail runs on the gathered activation, the same on every rank of a spatial group. So the
    gradients of each rank's parameters are the serial ones (or their blocks) before the
    data-parallel average. ``gather``/``scatter`` and the state maps are the tail's
    ``TensorParallel``'s: the front's parameters are the serial model's own.
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
        self.tensor = TensorParallel(model, tp, plan_words)
        self.serial, self.plan = model, self.tensor.plan
        self.module = RowBlocks(spatial_parallel(self.tensor.module, rows, height), rows)
        self.gather, self.scatter = self.tensor.gather, self.tensor.scatter
        self.gather_state, self.scatter_state = self.tensor.gather_state, self.tensor.scatter_state


def place_on_grid(model, grid, plan, height):
    """``TensorParallel`` over the tp axis, ``SpatialPlacement`` over the spatial one, or
    ``SpatialTensorPlacement`` over both; a layout that cannot run raises ``ConfigError`` in
    one line saying what would fit."""
    shape = grid.shape
    if shape.pp > 1:
        raise ConfigError(
            f"{option('grid')} {shape}: pipeline grids (pp) train in minidl.dist.pipeline's "
            "engine (with dp and tp), not on this placement"
        )
    try:
        if shape.spatial > 1 and shape.tp > 1:
            return SpatialTensorPlacement(model, grid, height, plan)
        if shape.spatial > 1:
            return SpatialPlacement(model, grid.group("spatial"), height)
        return TensorParallel(model, grid.group("tp"), plan)
    except (PlacementError, SplitError) as exc:
        raise ConfigError(f"{option('grid')} {shape}: {exc}") from None


class GridEngine(_DistributedEngine, LocalEngine):
    """One rank of a dp x tp, dp x spatial or dp x spatial x tp grid: its part of one replica,
    averaged over its dp group."""

    def __init__(self, config, options, comm, model, train_set, plan=None):
        shape = options.grid
        self.grid = Grid(comm, dp=shape.dp, pp=shape.pp, spatial=shape.spatial, tp=shape.tp)
        if plan is None and options.tp_layout == "one-weird-trick":
            plan = one_weird_trick_plan(model)
        self.parallel = place_on_grid(model, self.grid, plan, train_set[0][0].shape[-2])
        dp = self.grid.group("dp")
        super().__init__(
            config, self.parallel.module, train_set, dp, run_callbacks(options, comm, config.seed)
        )
        self.options, self.world = options, comm
        self.plain = self.optimizer
        self.counted = BatchSizes()
        self.callbacks.append(self.counted)
        self.sample_shape = train_set[0][0].shape
        # the serial model's optimizer: the schedule drives it, the checkpoint keeps it
        self.schedulable = self.checkpoint_optimizer = make_optimizer(config, model.parameters())
        self._dp_bytes = 0

    def distribute(self):
        """Take this rank's blocks of the (maybe resumed) serial model and optimizer state,
        then average over the data-parallel group from here on."""
        self.parallel.scatter()
        if any(self.checkpoint_optimizer.state):
            state = self.parallel.scatter_state(self.checkpoint_optimizer.state_dict())
            self.plain.load_state_dict(state)
        if self.comm.size > 1:
            options = self.options
            self.optimizer = DistributedOptimizer(
                self.plain, self.comm, allreduce=options.allreduce, bucket_mb=options.bucket_mb,
                overlap=options.overlap, model=self.model,
            )  # fmt: skip
            self.callbacks.insert(0, BatchWeighting(self.optimizer, self.loader, self.comm))

    def train(self, epoch, progress):
        """One epoch on the blocks; then the serial model and state are made whole again."""
        self.plain.lr = self.checkpoint_optimizer.lr
        before = dict(TRAFFIC)
        self.counted.steps.clear()
        stats, lr, records = super().train(epoch, progress)
        self.parallel.gather()
        self.checkpoint_optimizer.load_state_dict(
            self.parallel.gather_state(self.plain.state_dict())
        )
        sent = {k: v - before.get(k, 0) for k, v in TRAFFIC.items()}
        reduced = self.optimizer.stats["bytes_reduced"] if self.comm.size > 1 else 0
        dp_bytes, self._dp_bytes = reduced - self._dp_bytes, reduced
        counts = self.world.allgather_object(
            {"tp": sum(sent.values()), "dp": dp_bytes} | self._predicted()
        )
        record = {"kind": "grid", "epoch": epoch, "grid": str(self.options.grid),
                  "plan": self.parallel.plan, "steps": self.counted.steps.total()}  # fmt: skip
        for key in counts[0]:
            record[f"{key}_bytes"] = [c[key] for c in counts]
        return stats, lr, records + [record]

    def _predicted(self):
        """What ``minidl.perf.tensor_volume`` predicts for the epoch this rank just trained
        (the tp bytes of a spatial grid are none: its layers count their own)."""
        serial, plan, tp = self.parallel.serial, self.parallel.plan, self.grid.shape.tp
        if isinstance(self.parallel, SpatialPlacement):
            plan = [""] * len(leaves(serial))
        itemsize = next(iter(serial.parameters())).dtype.itemsize
        grads = gradient_bytes(serial, plan, tp, self.grid.coords["tp"], itemsize)
        steps = self.counted.steps
        volume = sum(
            count * sum(tensor_volume(serial, plan, self.sample_shape, b, tp, itemsize).values())
            for b, count in steps.items()
        )
        return {
            "tp_predicted": volume,
            "dp_predicted": grads * steps.total() if self.comm.size > 1 else 0,
        }

    def record(self):
        return self.options.record() | {"plan": self.parallel.plan}
