"""One training run in every mode: the epoch loop of ``minidl train``.

Per epoch (each step is Ben-Nun & Hoefler 2019, Alg. 2: minibatch, forward,
loss, backward, update): train this rank's share (``engines``), evaluate the
model on the test set (globally, over every rank's share), check that
nothing diverged, step the LR schedule, then rank 0 writes the checkpoint,
the epoch's metrics records and the plot, in that order (``rundir``).

A diverged epoch (a loss, the test loss or a weight that is NaN or inf)
stops the run with exit status 3 before anything of that epoch is written:
the checkpoint of the last good epoch stays the newest. Under MPI every rank
reaches the same verdict (the test metrics are global and the replicas are
equal), so all stop together. With more than one rank, a watchdog aborts the
job when a rank makes no progress for ``--hang-timeout`` seconds.
"""
import math
import os
import sys

from .. import random as md_random
from ..backend import get_array_module, limit_threads
from ..data import DataLoader
from ..dist.watchdog import Watchdog
from .checkpoint import save_checkpoint
from .engines import Diverged, LocalEngine, SessionEngine, format_summary
from .loop import evaluate
from .resume import apply_changes
from .rundir import RunDirectory
from .setup import build_model, default_run_dir, load_datasets, make_scheduler

DIVERGED_EXIT = 3


def saved_config(args, world_size):
    """The options worth keeping with the run (``config.json`` and the checkpoint)."""
    internal = ("argv", "_run", "command")
    return {k: v for k, v in vars(args).items() if k not in internal} | {"world_size": world_size}


def divergence(result, model):
    """Why the epoch's outcome is unusable (test loss or weights not finite), or None."""
    if not math.isfinite(result["loss"]):
        return f"the test loss is {result['loss']}"
    for name, p in model.named_parameters():
        if not bool(get_array_module(p.data).isfinite(p.data).all()):
            return f"the weights of {name} hold NaN or inf"
    return None


def epoch_record(epoch, lr, stats, result):
    return {"kind": "epoch", "epoch": epoch, "lr": lr,
            "train_loss": stats["loss"], "train_acc": stats["acc"],
            "test_loss": result["loss"], "test_acc": result["acc"],
            "train_images": stats["images"], "test_images": result["images"],
            "seconds": stats["seconds"], "images_per_s": stats["images_per_s"]}


def epoch_line(epoch, epochs, stats, result):
    return (f"epoch {epoch}/{epochs}: train loss {stats['loss']:.4f} "
            f"acc {100 * stats['acc']:.2f}% | test loss {result['loss']:.4f} "
            f"acc {100 * result['acc']:.2f}% | {stats['seconds']:.1f} s, "
            f"{stats['images_per_s']:.0f} img/s")


class TrainingRun:
    """Everything one rank needs for the run that ``args`` describes."""

    def __init__(self, args, comm=None, mode=None, checkpoint=None, given=frozenset()):
        """``checkpoint``: a loaded checkpoint to resume from; ``given``: the options typed anew."""
        self.args, self.comm, self.given = args, comm, given
        self.rank, self.size = (comm.rank, comm.size) if comm is not None else (0, 1)
        self._threads = limit_threads(self._thread_count())  # kept alive for the run
        md_random.manual_seed(args.seed)
        self.train_set, self.test_set = load_datasets(args)
        self.model = build_model(args, self.train_set)
        if mode is not None and mode.name != "sync":
            self.engine = SessionEngine(args, comm, mode, self.model, self.train_set)
        else:
            self.engine = LocalEngine(args, comm, self.model, self.train_set)
        schedulable = self.engine.schedulable
        self.scheduler = make_scheduler(args, schedulable) if schedulable is not None else None
        self.start_epoch = self._load(checkpoint) if checkpoint is not None else 0
        self.engine.distribute()
        self.test_loader = DataLoader(self.test_set, args.test_batch_size, rank=self.rank,
                                      world_size=self.size)
        self.out = self._run_directory(checkpoint)

    def _load(self, checkpoint):
        """Put the checkpoint's weights, optimizer, schedule and RNG state in place; its epoch."""
        self.model.load_state_dict(checkpoint.model_state)
        optimizer = self.engine.checkpoint_optimizer
        if checkpoint.optimizer_state is not None and optimizer is not None:
            optimizer.load_state_dict(checkpoint.optimizer_state)
        if self.scheduler is not None and checkpoint.meta.get("scheduler"):
            self.scheduler.load_state_dict(checkpoint.meta["scheduler"])
        if optimizer is not None:
            apply_changes(self.args, self.given, optimizer, self.scheduler)
        md_random.set_state(checkpoint.meta["rng"])
        return int(checkpoint.meta["epoch"])

    def _run_directory(self, checkpoint):
        """Rank 0 prepares the folder (a new run, or a resumed one); every rank learns its path."""
        args = self.args
        resumed_dir = os.path.dirname(os.path.abspath(args.resume)) if args.resume else None
        out = args.out or resumed_dir or default_run_dir(args)
        if self.comm is not None:
            out = self.comm.bcast_object(out)
        self.run_dir = RunDirectory(out)
        if self.rank == 0:
            config = saved_config(args, self.size)
            if checkpoint is not None and os.path.abspath(out) == resumed_dir:
                self.run_dir.resume(self.start_epoch, config)
            else:
                self.run_dir.start(config, overwrite=args.overwrite)
        return out

    def run(self):
        """Train up to ``--epochs``; returns the exit status (0, or 3 when training diverged)."""
        args = self.args
        watchdog = None
        if self.comm is not None and self.comm.size > 1 and args.hang_timeout > 0:
            watchdog = Watchdog(args.hang_timeout, self.rank, self.comm.abort).start()
        tracing = None
        if args.trace:  # perf: timeline of per-layer compute and the optimizer step, every rank
            from ..perf.training_trace import TrainingTrace
            tracing = TrainingTrace(self.model, self.engine.optimizer, self.rank, args.device,
                                    comm=self.comm).start()
        try:
            result = self._epochs()
        except Diverged as exc:
            if self.rank == 0:
                kept = (f"the checkpoint of epoch {self._last_good} is kept ({self.run_dir.checkpoint})"
                        if self._last_good else "no checkpoint was written")
                print(f"minidl train: {exc}; {kept}", file=sys.stderr, flush=True)
            return DIVERGED_EXIT
        finally:
            self.engine.close()
            if watchdog is not None:
                watchdog.stop()
        if tracing is not None:  # perf: every rank writes its part, rank 0 merges them
            trace_path = tracing.finish(self.out, self.comm)
            if self.rank == 0:
                print(f"timeline: {trace_path} (open it in https://ui.perfetto.dev)")
        if self.rank == 0:
            if result is not None:
                print(f"test accuracy {100 * result['acc']:.2f}% after epoch {args.epochs}; "
                      f"run directory: {self.out}")
            else:
                print(f"nothing to do: the checkpoint is already at epoch {self.start_epoch}; "
                      "raise --epochs to train further")
        return 0

    def _thread_count(self):
        threads = self.args.threads
        if threads is None and self.size > 1 and self.size >= (os.cpu_count() or 1):
            threads = 1  # as many ranks as cores: more BLAS threads would only contend
        return threads

    def _epochs(self):
        args, engine = self.args, self.engine
        result = None
        self._last_good = self.start_epoch
        for epoch in range(self.start_epoch + 1, args.epochs + 1):
            progress = self.rank == engine.progress_rank and not args.no_progress
            stats, lr, records = engine.train(epoch, progress)
            result = evaluate(self.model, self.test_loader, len(self.train_set.classes),
                              args.device, comm=self.comm)
            problem = divergence(result, self.model)
            if problem is not None:
                raise Diverged(f"epoch {epoch}: {problem}; training diverged. Lower --lr, or "
                               "clip gradients (--clip-grad-norm)")
            if self.scheduler is not None:
                self.scheduler.step()
            if self.rank == 0:
                self._record(epoch, lr, stats, result, records)
            self._last_good = epoch
            engine.evaluated()
        return result

    def _record(self, epoch, lr, stats, result, records):
        args = self.args

        def save(path):
            save_checkpoint(path, self.model, self.engine.checkpoint_optimizer, epoch=epoch,
                            rng=md_random.get_state(), config=saved_config(args, self.size),
                            scheduler=self.scheduler.state_dict() if self.scheduler else None)

        print(epoch_line(epoch, args.epochs, stats, result), flush=True)
        self.run_dir.record_epoch(save, [epoch_record(epoch, lr, stats, result), *records])
        for record in records:
            if record.get("kind") == "dist":
                print(format_summary(record), flush=True)
