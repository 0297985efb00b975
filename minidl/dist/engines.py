"""How one epoch of distributed training happens on this rank (see ``minidl.train.engine``).

``SyncEngine`` runs ``sync`` (``DistributedOptimizer`` or ``CompressedOptimizer``),
``SessionEngine`` the other modes, each rank in its role of a consistency session
(``consistency.py``). Both add the hang watchdog and the injected straggler to the
loop's callbacks, and (sync) the weighting of uneven local batches.
"""

import sys

import numpy as np

from ..train.callbacks import Callback, NonFiniteLossError
from ..train.config import option
from ..train.engine import Diverged, LocalEngine
from ..train.loop import train_epoch
from ..train.setup import augmentation, make_optimizer
from .compressed import CompressedOptimizer
from .consistency import global_train_stats, make_session
from .consistency.ps import TrainingAborted
from .data_parallel import DistributedOptimizer
from .heartbeat import Heartbeat
from .straggler import Straggler
from .telemetry import summarize_epoch
from .watchdog import Watchdog, idle


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


def run_callbacks(options, comm, seed, servers=0):
    """The watchdog and this rank's straggler, as ``options`` asks; checks the ranks named."""
    callbacks = []
    if comm.size > 1 and options.hang_timeout > 0:
        watchdog = Watchdog(options.hang_timeout, comm.rank, comm.abort).start()
        watchdog.listen(Heartbeat(comm, idle))  # after start: its address exchange may hang too
        callbacks.append(watchdog)
    for rank in options.stragglers:
        if not servers <= rank < comm.size:
            raise ValueError(
                f"{option('straggler')} {rank}:{options.stragglers[rank]}: rank {rank} is not "
                f"a worker; workers are ranks {servers}..{comm.size - 1}"
            )
    if options.stragglers or options.jitter:
        callbacks.append(Straggler(comm.rank, options.stragglers, options.jitter, seed=seed))
    return callbacks


class _DistributedEngine:
    """What both engines share: the options' record, the console line, the watchdog's stop."""

    def record(self):
        return self.options.record()

    def format_record(self, summary):
        """One line of a ``"dist"`` record for the console."""
        line = (
            f"  {summary['mode']}: {summary['gradients_per_s']:.1f} gradients/s, "
            f"{summary['updates_per_s']:.1f} updates/s, "
            f"{summary['worker_bytes_sent'] / 2**20:.1f} MiB pushed"
        )
        if "staleness" in summary:
            st = summary["staleness"]
            line += (
                f", staleness mean {st['mean']:.2f} max {st['max']}, gate wait "
                + " ".join(f"{w:.1f}" for w in summary["gate_wait_s"])
                + " s"
            )
        waits = " ".join(f"{w:.1f}" for w in summary["per_worker"]["wait_s"])
        return line + ", waiting " + waits + " s"

    def close(self):
        for callback in self.callbacks:
            if isinstance(callback, Watchdog):
                callback.stop()


class SyncEngine(_DistributedEngine, LocalEngine):
    """``sync``: the whole model on every rank, one averaged update per step."""

    def __init__(self, config, options, comm, model, train_set):
        super().__init__(config, model, train_set, comm, run_callbacks(options, comm, config.seed))
        self.options = options

    def distribute(self):
        """Wrap the optimizer (after a resume loaded its state): averaging starts here."""
        options, plain = self.options, self.optimizer
        if options.compressed:
            self.optimizer = CompressedOptimizer(
                plain, self.comm, options.compressor, error_feedback=options.error_feedback,
                seed=self.config.seed, allreduce=options.allreduce, model=self.model,
            )  # fmt: skip
        else:
            self.optimizer = DistributedOptimizer(
                plain, self.comm, allreduce=options.allreduce, bucket_mb=options.bucket_mb,
                overlap=options.overlap, model=self.model,
            )  # fmt: skip
        self.callbacks.insert(0, BatchWeighting(self.optimizer, self.loader, self.comm))

    def epoch_records(self, epoch):
        return [self.optimizer.compression_record(epoch)] if self.options.compressed else []


class SessionEngine(_DistributedEngine):
    """bsp / ssp:S / asp / avg:H / easgd: this rank's role in a consistency session."""

    def __init__(self, config, options, comm, model, train_set):
        self.config, self.options, self.comm, self.model = config, options, comm, model
        self.session = make_session(
            options, comm, model, lambda params: make_optimizer(config, params), seed=config.seed
        )
        self.servers = self.session.layout.servers if options.mode.uses_server else 0
        self.callbacks = run_callbacks(options, comm, config.seed, self.servers)
        self.schedulable = self.session.schedulable
        self.optimizer = self.session.optimizer
        self.checkpoint_optimizer = None  # the state lives on the servers, sharded
        self.loader = self.session.train_loader(
            train_set, config.batch_size, config.seed, augmentation(config)
        )

    @property
    def progress_rank(self):
        """The rank that shows a progress bar: the first worker."""
        return self.servers

    def distribute(self):
        """Nothing to wrap: the session's optimizers talk to the servers or peers themselves."""

    def train(self, epoch, progress):
        self.loader.set_epoch(epoch - 1)
        lr = self.schedulable.lr if self.schedulable else None

        def train():
            try:
                return train_epoch(
                    self.model, self.session.optimizer, self.loader, epoch, self.config.device,
                    progress=progress, callbacks=self.callbacks,
                )  # fmt: skip
            except NonFiniteLossError as exc:
                print(f"minidl train (rank {self.comm.rank}): {exc}", file=sys.stderr, flush=True)
                raise TrainingAborted(str(exc)) from exc

        stats, stopped = self.session.run_epoch(train)
        records = self.session.finish_epoch(stats, stopped, lr)
        if records is None:
            raise Diverged(
                f"epoch {epoch}: a worker's loss was not finite; training stopped on every rank. "
                f"Lower {option('lr')}, or clip gradients"
            )
        if self.comm.rank != 0:
            return stats, lr, []
        stats = global_train_stats(records)
        lr = next(r["lr"] for r in records if r.get("lr") is not None)
        summary = {
            "epoch": epoch,
            **summarize_epoch(self.options.mode.text, records, stats["images"]),
        }
        return stats, lr, [summary]

    def evaluated(self):
        self.session.restore_local()

    def close(self):
        self.session.close()
        super().close()
