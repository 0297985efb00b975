"""How ranks cooperate in a training run: the consistency model (``DistMode``, described in
``consistency/``) and the options of the distributed layouts (``DistConfig``), which the
``minidl train`` flags ``--dist``, ``--servers``... fill.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import models
from ..train.config import ConfigError, TrainConfig, check_choice, check_number, option
from .collectives import ALLREDUCE_ALGORITHMS
from .consistency.server import DEFAULT_POLL_INTERVAL
from .grid import GridShape
from .pipeline import schedules

MODES = ("sync", "bsp", "ssp", "asp", "avg", "easgd")
TP_LAYOUTS = ("rule", "one-weird-trick")  # minidl.dist.tensor.plan, one_weird_trick_plan
STAGE_CUTS = ("memory", "layers", "parameters")  # minidl.dist.pipeline.cut
EASGD_TAU = 4


def _whole(value):
    """True for an int >= 1 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class DistMode:
    """A consistency model: ``name`` with its staleness bound, period or elastic weight."""

    name: str = "sync"
    staleness: int | None = None  # bsp: 0; ssp: S; asp: None (unbounded)
    period: int | None = None  # avg: H; easgd: tau (None: 1, for easgd 4)
    alpha: float | None = None  # easgd; None: 0.9 / workers

    def __post_init__(self):
        check_choice("dist", self.name, MODES)
        if self.name == "bsp" and self.staleness != 0:
            object.__setattr__(self, "staleness", 0)
        if self.name == "ssp":
            check_number("dist", self.staleness, integer=True)
        if self.period is None:
            object.__setattr__(self, "period", EASGD_TAU if self.name == "easgd" else 1)
        check_number("dist", self.period, positive=True, integer=True)
        if self.alpha is not None and not 0 < self.alpha < 1:
            raise ConfigError(f"{option('dist')} easgd: alpha {self.alpha} must be in (0, 1)")

    @property
    def uses_server(self):
        return self.name in ("bsp", "ssp", "asp", "easgd")

    @property
    def text(self):
        """The mode as ``--dist`` writes it: ``ssp:2``, ``avg:4``, ``easgd:0.5:4``..."""
        if self.name == "ssp":
            return f"ssp:{self.staleness}"
        if self.name == "avg":
            return f"avg:{self.period}"
        if self.name == "easgd" and (self.alpha is not None or self.period != EASGD_TAU):
            alpha = "" if self.alpha is None else f"{self.alpha:g}"
            return f"easgd:{alpha}:{self.period}" if self.period != EASGD_TAU else f"easgd:{alpha}"
        return self.name


@dataclass
class DistConfig:
    """The options of a distributed run; every field is a ``minidl train`` flag."""

    mode: DistMode = field(default_factory=DistMode)
    allreduce: str = "auto"
    bucket_mb: float = 4.0  # fused gradient buffers (sync)
    overlap: bool = True  # average gradients during backward (sync)
    servers: int = 1  # parameter-server ranks (bsp, ssp, asp, easgd)
    poll_interval: float = DEFAULT_POLL_INTERVAL  # sleep between polls; 0: blocking MPI waits
    compressor: object = None  # a minidl.dist.compression scheme (sync, bsp, ssp, asp)
    error_feedback: bool | None = None  # None: the scheme's default
    stragglers: dict = field(default_factory=dict)  # rank -> factor: sleeps (factor-1) x compute
    jitter: float = 0.0  # mean of an exponential sleep after every step, seconds
    hang_timeout: float = 300.0  # abort when a rank makes no progress this long; 0: never
    tp_layout: str = "rule"  # grids with tp > 1: "rule" or "one-weird-trick" (TP_LAYOUTS)
    grid: GridShape | None = None  # the process grid (None: data parallel over every rank)
    micro_batches: int = 1  # pipeline (grid pp > 1): micro-batches per batch
    schedule: str = "1f1b"  # pipeline: one of minidl.dist.pipeline.SCHEDULES
    chunks: int | None = None  # pipeline: model chunks per rank (None: 2 interleaved, else 1)
    stages: str = "memory"  # pipeline: cut the stages by "memory", "layers" or "parameters"
    zero: int = 0  # sync: ZeRO stage (1: optimizer state sharded, 2: gradients, 3: weights too)
    sync_bn: bool = False  # sync: batch-norm statistics over the dp replicas' whole batch

    def check(self, config: TrainConfig, resume=None) -> DistConfig:
        """Refuse options that do not fit the mode or ``config``; returns self."""
        mode = self.mode
        check_choice("allreduce", self.allreduce, ("auto", *ALLREDUCE_ALGORITHMS))
        check_number("bucket_mb", self.bucket_mb, positive=True)
        check_number("servers", self.servers, positive=True, integer=True)
        for name in ("poll_interval", "jitter", "hang_timeout"):
            check_number(name, getattr(self, name))
        for rank, factor in self.stragglers.items():
            check_number("straggler", rank, integer=True)
            check_number("straggler", factor, minimum=1.0)
        what = f"{option('dist')} {mode.text}"
        check_choice("tp_layout", self.tp_layout, TP_LAYOUTS)
        if self.tp_layout != "rule" and (self.grid is None or self.grid.tp == 1):
            raise ConfigError(
                f"{option('tp_layout')} {self.tp_layout} places layers on a tensor-parallel "
                f"group; add {option('grid')} with tp > 1 (e.g. tp=2)"
            )
        if self.compressed and self.grid is not None and self.grid.size != self.grid.dp:
            raise ConfigError(
                f"{option('compress')} applies to data-parallel grids; {option('grid')} "
                f"{self.grid} averages its gradients uncompressed: drop {option('compress')}"
            )
        if self.grid is not None and mode.name != "sync":
            raise ConfigError(
                f"{option('grid')} arranges ranks for synchronous training, not for {what}"
            )
        self._check_residual(config)
        self._check_pipeline(config)
        self._check_zero(config, what)
        self._check_sync_bn(what)
        self._check_recompute(config)
        if self.servers != 1 and not mode.uses_server:
            raise ConfigError(
                f"{option('servers')} applies to {option('dist')} bsp, ssp:S, asp and easgd, "
                f"not to {what}"
            )
        if self.servers > 1 and config.clip_grad_norm is not None:
            raise ConfigError(
                f"{option('clip_grad_norm')} needs the whole gradient's norm, which no shard "
                f"server sees; use {option('servers')} 1"
            )
        if self.compressed and mode.name in ("avg", "easgd"):
            raise ConfigError(
                f"{option('compress')} applies to {option('dist')} sync, bsp, ssp:S and asp, "
                f"not to {what}"
            )
        if self.error_feedback is not None and not self.compressed:
            raise ConfigError(f"{option('error_feedback')} needs {option('compress')}")
        if config.trace and mode.name != "sync":
            raise ConfigError(
                f"{option('trace')} records {option('dist')} sync or single-process runs, "
                f"not {what}"
            )
        if resume and mode.name != "sync":
            raise ConfigError(
                f"{option('resume')} works with {option('dist')} sync or without "
                f"{option('dist')}, not with {what}"
            )
        return self

    def _check_zero(self, config, what):
        """ZeRO shards what the ranks of synchronous data parallelism replicate."""
        check_choice("zero", self.zero, (0, 1, 2, 3))
        if not self.zero:
            return
        if self.mode.name != "sync":
            raise ConfigError(
                f"{option('zero')} shards the replicas of {option('dist')} sync; {what} keeps "
                f"no replicated optimizer state to shard: drop {option('zero')}"
            )
        if self.compressed:
            raise ConfigError(
                f"{option('zero')} {self.zero} reduce-scatters gradients uncompressed: drop "
                f"{option('compress')} or {option('zero')}"
            )
        if config.clip_grad_norm is not None:
            raise ConfigError(
                f"{option('clip_grad_norm')} needs the whole gradient's norm, which no rank "
                f"holds under {option('zero')} {self.zero}: drop one of them"
            )
        if self.pipelined:
            raise ConfigError(
                f"{option('zero')} with a pipeline ({option('grid')} {self.grid}): the stages "
                f"average their gradients once a step unsharded; drop {option('zero')}"
            )
        if self.zero == 3:
            self._check_zero3(config)

    def _check_sync_bn(self, what):
        """Synchronised batch norm joins the statistics of replicas that each hold a share of
        one batch: sync data parallelism, without tp or a pipeline."""
        if not self.sync_bn:
            return
        if self.mode.name != "sync":
            raise ConfigError(
                f"{option('sync_bn')} joins the batch statistics of {option('dist')} sync's "
                f"replicas in every step; {what} trains replicas apart: drop {option('sync_bn')}"
            )
        if self.pipelined:
            raise ConfigError(
                f"{option('sync_bn')} with a pipeline ({option('grid')} {self.grid}): "
                f"micro-batches normalise separately by design; drop {option('sync_bn')}"
            )
        if self.grid is not None and self.grid.tp > 1:
            raise ConfigError(
                f"{option('sync_bn')} with {option('grid')} {self.grid}: tensor-parallel layers "
                f"split channels, not the batch; drop {option('sync_bn')} or the tp axis"
            )

    def _check_zero3(self, config):
        """Stage 3 gathers each layer's weights when the layer runs: over dp alone, or on the
        dp axis of a tp grid laid out by the rule; nothing else may wrap the layers' forward."""
        if self.grid is not None and self.grid.spatial > 1:
            raise ConfigError(
                f"{option('zero')} 3 with {option('grid')} {self.grid}: stage 3 gathers each "
                f"layer over dp alone or beside tp, not beside spatial blocks; use "
                f"{option('zero')} 1 or 2 there"
            )
        if self.tp_layout != "rule":
            raise ConfigError(
                f"{option('zero')} 3 with {option('tp_layout')} {self.tp_layout}: stage 3 gathers "
                f"each layer beside tp laid out by the rule; use {option('tp_layout')} rule, or "
                f"{option('zero')} 1 or 2"
            )
        if config.trace:
            raise ConfigError(
                f"{option('trace')} times each layer's forward, which {option('zero')} 3 "
                f"already wraps to gather its weights: drop one of them"
            )

    def _check_recompute(self, config):
        """Recomputed segments run a plain Sequential's layers: a placement whose model moves
        data between two layers of its own forward is refused."""
        if not config.recompute or self.grid is None:
            return
        if self.grid.spatial > 1:
            raise ConfigError(
                f"{option('recompute')} with {option('grid')} {self.grid}: the spatial model "
                f"gathers its image blocks between two layers, which segments would skip; drop "
                f"{option('recompute')} or the spatial axis"
            )
        if self.grid.tp > 1 and self.tp_layout != "rule":
            raise ConfigError(
                f"{option('recompute')} with {option('tp_layout')} {self.tp_layout}: its first "
                f"layers run on blocks of the batch, gathered between two layers, which segments "
                f"would skip; use {option('tp_layout')} rule"
            )

    @property
    def pipelined(self):
        """True when the grid has a pipeline axis (pp > 1)."""
        return self.grid is not None and self.grid.pp > 1

    def _check_pipeline(self, config):
        if not self.pipelined:
            if (self.micro_batches, self.schedule, self.chunks) != (1, "1f1b", None):
                raise ConfigError(
                    f"{option('micro_batches')}, {option('schedule')} and {option('chunks')} "
                    f"set up a pipeline: add pp=P to {option('grid')} (e.g. {option('grid')} pp=2)"
                )
            if self.stages != "memory":
                raise ConfigError(
                    f"{option('stages')} {self.stages} cuts a pipeline's stages: add pp=P to "
                    f"{option('grid')} (e.g. {option('grid')} pp=2)"
                )
            return
        check_choice("stages", self.stages, STAGE_CUTS)
        if self.grid.spatial > 1:
            raise ConfigError(
                f"{option('grid')} {self.grid}: a pipeline (pp) trains through fit with dp "
                "and tp; spatial trains with dp and tp, without pp"
            )
        self._check_stages(len(models.build(config.model, activation=config.activation)))
        if config.batch_size < self.micro_batches:
            raise ConfigError(
                f"{option('batch_size')} {config.batch_size} cannot make {self.micro_batches} "
                f"micro-batches: use {option('micro_batches')} {config.batch_size} or fewer, or a "
                "larger batch"
            )
        if config.clip_grad_norm is not None:
            raise ConfigError(
                f"{option('clip_grad_norm')} needs the whole gradient's norm, which no pipeline "
                "stage sees; drop it or train without pp"
            )

    def _check_residual(self, config):
        """Tensor and spatial parallelism split the layers of a flat Sequential: a residual
        block nests its layers beside a skip connection."""
        axes = [
            f"{axis}={n}" for axis in ("tp", "spatial") if (n := getattr(self.grid, axis, 1)) > 1
        ]
        if config.model in models.RESIDUAL_MODELS and axes:
            how = "by the tensor-parallel rule" if "tp" in axes[0] else "into spatial row blocks"
            raise ConfigError(
                f"{option('grid')} {axes[0]}: {config.model}'s residual blocks cannot be split "
                f"{how}; use {option('dist')} sync, {option('zero')}, {option('recompute')} "
                "or a pipeline (pp) of whole blocks"
            )

    def _check_stages(self, layers):
        """Refuse a schedule, micro-batch or chunk count that cannot run on ``layers``."""
        ranks, micro_batches, chunks = self.grid.pp, self.micro_batches, self.chunks
        if self.schedule not in schedules.SCHEDULES:
            raise ConfigError(
                f"{option('schedule')} {self.schedule!r} does not exist; choose one of "
                f"{', '.join(schedules.SCHEDULES)}"
            )
        if not _whole(micro_batches):
            raise ConfigError(
                f"{option('micro_batches')} {micro_batches!r}: a batch is cut into M >= 1 "
                "micro-batches (1: no micro-batching)"
            )
        chunks = schedules.default_chunks(self.schedule) if chunks is None else chunks
        if not _whole(chunks):
            raise ConfigError(f"{option('chunks')} {chunks!r}: each rank holds V >= 1 model chunks")
        if ranks > layers:
            raise ConfigError(
                f"pp={ranks} cuts the model's {layers} layers into {ranks} stages, one layer at "
                f"least each: use pp={layers} or fewer"
            )
        if ranks * chunks > layers:
            raise ConfigError(
                f"{option('chunks')} {chunks} on pp={ranks} needs {ranks * chunks} stages but the "
                f"model has {layers} layers: use {option('chunks')} {layers // ranks} or fewer"
            )
        try:
            schedules.check(self.schedule, ranks, micro_batches, chunks)
        except ValueError as exc:
            raise ConfigError(f"{option('schedule')} {self.schedule}: {exc}") from None

    @property
    def compressed(self):
        return self.compressor is not None and self.compressor.name != "none"

    def record(self) -> dict:
        """The options as ``config.json`` keeps them (the flags' own text)."""
        return {
            "dist": self.mode.text,
            "allreduce": self.allreduce,
            "bucket_mb": self.bucket_mb,
            "overlap": self.overlap,
            "servers": self.servers,
            "poll_interval": self.poll_interval,
            "compress": self.compressor.name if self.compressed else "none",
            "error_feedback": {None: "auto", True: "on", False: "off"}[self.error_feedback],
            "straggler": [f"{rank}:{factor}" for rank, factor in self.stragglers.items()],
            "jitter": self.jitter,
            "hang_timeout": self.hang_timeout,
            "tp_layout": self.tp_layout,
            "grid": None if self.grid is None else str(self.grid),
            "zero": self.zero,
        } | self._layout_record()

    def _layout_record(self):
        """A pipeline's options, and ``sync_bn`` when set (without it, config.json as before)."""
        pipeline = self._pipeline_record() if self.pipelined else {}
        return pipeline | ({"sync_bn": True} if self.sync_bn else {})

    def _pipeline_record(self):
        return {
            "micro_batches": self.micro_batches,
            "schedule": self.schedule,
            "chunks": self.chunks,
            "stages": self.stages,
        }


def layout_label(record, ranks=None):
    """What a run was, from its ``DistConfig.record()`` (or ``config.json``): ``grid dp=2,tp=2``,
    ``sync on 2 ranks zero 2`` (with ``ranks``), ``ssp:2``..."""
    if record.get("grid"):
        label = f"grid {record['grid']}"
        if record.get("schedule"):
            label += f" {record['schedule']}, {record.get('micro_batches', 1)} micro-batches"
    else:
        label = record.get("dist") or "single process"
        label += f" on {ranks} ranks" if ranks else ""
    if record.get("zero"):
        label += f" zero {record['zero']}"
    return label + (" sync-bn" if record.get("sync_bn") else "")
