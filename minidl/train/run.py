"""One training run in every mode: the epoch loop of ``minidl train`` and ``fit``.

Per epoch (each step is Ben-Nun & Hoefler 2019, Alg. 2: minibatch, forward,
loss, backward, update): train this rank's share (the engine), evaluate the
model on the test set (globally, over every rank's share), check that
nothing diverged, step the LR schedule, then rank 0 writes the checkpoint,
the epoch's metrics records and the plot, in that order (``rundir``).

A diverged epoch (a loss, the test loss or a weight that is NaN or inf)
raises ``Diverged`` before anything of that epoch is written: the checkpoint
of the last good epoch stays the newest. Under MPI every rank reaches the
same verdict (the test metrics are global and the replicas are equal), so
all stop together.
"""

import math
import os

import numpy as np

from .. import conv
from .. import random as md_random
from ..backend import get_array_module, limit_threads
from ..data import DataLoader
from ..optim import ReduceOnPlateau
from .checkpoint import load_checkpoint, save_checkpoint
from .config import TrainConfig, option
from .engine import Diverged, LocalEngine
from .loop import evaluate
from .resume import apply_changes, changes, check_fixed
from .run_status import job_aborted, when_aborted
from .rundir import RunDirectory
from .setup import build_model, default_run_dir, load_datasets, make_scheduler

# a test loss this many times the first epoch's has diverged though finite: a cross-entropy that
# starts near ln(classes) and grows a million-fold means logits apart by millions, no model
DIVERGED_GROWTH = 1e6


def divergence(result, model, first_loss=None):
    """Why the epoch's outcome is unusable, or None: a test loss that is not finite or grew
    beyond ``DIVERGED_GROWTH`` times ``first_loss`` (the first epoch's), or weights not finite."""
    if not math.isfinite(result["loss"]):
        return f"the test loss is {result['loss']}"
    if first_loss is not None and result["loss"] > DIVERGED_GROWTH * first_loss:
        return (
            f"the test loss is {result['loss']:.3g}, over {DIVERGED_GROWTH:g} times the first "
            f"epoch's ({first_loss:.3g})"
        )
    for name, p in model.named_parameters():
        if not bool(get_array_module(p.data).isfinite(p.data).all()):
            return f"the weights of {name} hold NaN or inf"
    return None


def epoch_record(epoch, lr, stats, result):
    return {
        "kind": "epoch", "epoch": epoch, "lr": lr,
        "train_loss": stats["loss"], "train_acc": stats["acc"],
        "test_loss": result["loss"], "test_acc": result["acc"],
        "test_top1_error": 1.0 - result["acc"], "test_top5_error": 1.0 - result["top5_acc"],
        "train_images": stats["images"], "test_images": result["images"],
        "seconds": stats["seconds"], "images_per_s": stats["images_per_s"],
    } | ({"skipped_images": result["skipped"]} if "skipped" in result else {})  # fmt: skip


def epoch_line(epoch, epochs, stats, result):
    return (
        f"epoch {epoch}/{epochs}: train loss {stats['loss']:.4f} "
        f"acc {100 * stats['acc']:.2f}% | test loss {result['loss']:.4f} "
        f"acc {100 * result['acc']:.2f}% | {stats['seconds']:.1f} s, "
        f"{stats['images_per_s']:.0f} img/s"
    )


class TrainingRun:
    """Everything one rank needs for the run ``config`` describes.

    ``make_engine(config, model, train_set)`` builds the engine (``engine.py``;
    the distributed ones come from ``minidl.dist``); ``comm`` is the run's
    communicator (None in a process alone); ``resume`` the path of a
    checkpoint to continue from.
    """

    def __init__(self, config: TrainConfig, make_engine=LocalEngine, comm=None, resume=None):
        self.config, self.comm = config.check(), comm
        self.rank, self.size = (comm.rank, comm.size) if comm is not None else (0, 1)
        self.run_dir = self._run_directory(resume)
        try:
            self._prepare(make_engine, resume)
        except BaseException:
            self.run_dir.close()
            raise

    def _prepare(self, make_engine, resume):
        config = self.config
        self._threads = limit_threads(self._thread_count())  # kept alive for the run
        conv.configure(enabled=not config.deterministic)
        checkpoint = load_checkpoint(resume) if resume else None
        saved = checkpoint.training_config() if checkpoint is not None else None
        if saved is not None:
            check_fixed(saved, config.record())
        md_random.manual_seed(config.seed)
        self.train_set, self.test_set = load_datasets(config, self.comm)
        self.model = build_model(config, self.train_set)
        self.engine = make_engine(config, self.model, self.train_set)
        schedulable = self.engine.schedulable
        self.scheduler = make_scheduler(config, schedulable) if schedulable is not None else None
        self.start_epoch = 0
        if checkpoint is not None:
            changed, notes = changes(saved, self.record())
            if self.rank == 0:
                for note in notes:
                    print(f"resume: {note}", flush=True)
            self.start_epoch = self._load(checkpoint, changed)
        self.engine.distribute()
        self.test_loader = DataLoader(
            self.test_set, config.test_batch_size, rank=self.rank, world_size=self.size,
            workers=config.data_workers, skip_unreadable=config.skip_unreadable,
        )  # fmt: skip
        self._start_run_directory(resume, checkpoint)

    def record(self):
        """The options worth keeping with the run (``config.json`` and the checkpoint)."""
        # world_size: the processes sharing each step's samples (an engine may say fewer)
        return self.config.record() | {"world_size": self.size} | self.engine.record()

    def _load(self, checkpoint, changed):
        """Put the checkpoint's weights, optimizer, schedule and RNG state in place; its epoch."""
        self.model.load_state_dict(checkpoint.model_state)
        optimizer = self.engine.checkpoint_optimizer
        if checkpoint.optimizer_state is not None and optimizer is not None:
            optimizer.load_state_dict(checkpoint.optimizer_state)
        if self.scheduler is not None and checkpoint.meta.get("scheduler"):
            self.scheduler.load_state_dict(checkpoint.meta["scheduler"])
        if self.engine.schedulable is not None:  # the optimizer the schedule drives
            apply_changes(self.config, changed, self.engine.schedulable, self.scheduler)
        md_random.set_state(checkpoint.meta["rng"])
        return int(checkpoint.meta["epoch"])

    def _run_directory(self, resume):
        """Every rank learns the run's folder (rank 0 writes it: ``_start_run_directory``)."""
        resumed_dir = os.path.dirname(os.path.abspath(resume)) if resume else None
        out = self.config.out or resumed_dir or default_run_dir(self.config)
        if self.comm is not None:
            out = self.comm.bcast_object(out)
        self.out = out
        return RunDirectory(out)

    def _start_run_directory(self, resume, checkpoint):
        """Rank 0 takes the folder's lock (refused at once when another run holds it: under
        MPI the error ends the job), then prepares it: the checkpoint's own run continued, or
        a new run."""
        self.run_id = None
        if self.rank != 0:
            return
        self.run_dir.open()
        saved_id = checkpoint.meta.get("run_id") if checkpoint is not None else None
        in_place = resume and os.path.abspath(self.out) == os.path.dirname(os.path.abspath(resume))
        if in_place and not (self.config.overwrite and self.run_dir.run_id() != saved_id):
            self.run_dir.resume(resume, self.start_epoch, self.record(), saved_id)
            self.run_id = saved_id
        else:
            self.run_id = self.run_dir.start(self.record(), overwrite=self.config.overwrite)

    def run(self):
        """Train up to ``config.epochs``; returns the last evaluation (None: nothing to do).

        Raises ``Diverged`` (its message says which checkpoint is kept) when
        a loss, the test loss or a weight stopped being finite. The run
        folder's lock is given up at the end, however the run ends. MPI's report
        that a peer's process died ends the job here, naming it in the run folder
        (``Communicator.abort_if_peer_failed``).
        """
        self._last_good = self.start_epoch
        forget = (
            when_aborted(lambda reason: self.run_dir.record_abort(self._last_good, reason))
            if self.rank == 0
            else None
        )
        try:
            return self._run()
        except BaseException as exc:
            if self.comm is not None:  # a dead peer: say which while the folder is open
                self.comm.abort_if_peer_failed(exc)
            raise
        finally:
            if forget is not None:
                forget()
            self.run_dir.close()

    def _run(self):
        tracing = None
        timeline = getattr(self.engine, "timeline", None)  # an engine's own (pipelines)
        if self.config.trace and timeline is not None:
            tracing = timeline().start()
        elif self.config.trace:  # perf: timeline of per-layer compute and the step, every rank
            from ..perf.training_trace import TrainingTrace

            tracing = TrainingTrace(
                self.model, self.engine.optimizer, self.rank, self.config.device, comm=self.comm
            ).start()
        try:
            result = self._epochs()
        except Diverged as exc:
            kept = (
                f"the checkpoint of epoch {self._last_good} is kept ({self.run_dir.checkpoint})"
                if self._last_good
                else "no checkpoint was written"
            )
            job_aborted(f"{exc}; {kept}")
            raise Diverged(f"{exc}; {kept}") from None
        finally:
            self.engine.close()
        if tracing is not None:  # perf: every rank writes its part, rank 0 merges them
            trace_path = tracing.finish(self.out, self.comm)
            if self.rank == 0:
                print(f"timeline: {trace_path} (open it in https://ui.perfetto.dev)")
        if self.rank == 0:
            if result is not None:
                print(
                    f"test accuracy {100 * result['acc']:.2f}% after epoch {self.config.epochs}; "
                    f"run directory: {self.out}"
                )
            else:
                print(
                    f"nothing to do: the checkpoint is already at epoch {self.start_epoch}; "
                    f"raise {option('epochs')} to train further"
                )
        return result

    def _thread_count(self):
        threads = self.config.threads
        if threads is None and self.size > 1 and self.size >= (os.cpu_count() or 1):
            threads = 1  # as many ranks as cores: more BLAS threads would only contend
        return threads

    def _epochs(self):
        config, engine = self.config, self.engine
        result = first_loss = None
        for epoch in range(self.start_epoch + 1, config.epochs + 1):
            progress = self.rank == engine.progress_rank and config.progress
            stats, lr, records = engine.train(epoch, progress)
            result = evaluate(
                self.model, self.test_loader, len(self.train_set.classes), config.device,
                comm=self.comm, callbacks=engine.callbacks,
            )  # fmt: skip
            if config.skip_unreadable:
                result["skipped"] = self._skipped()
            problem = divergence(result, self.model, first_loss)
            if problem is not None:
                raise Diverged(
                    f"epoch {epoch}: {problem}; training diverged. Lower {option('lr')}, or "
                    f"clip gradients ({option('clip_grad_norm')})"
                )
            if first_loss is None:
                first_loss = result["loss"]
            if isinstance(self.scheduler, ReduceOnPlateau):
                self.scheduler.step(1.0 - result["acc"])  # the validation top-1 error
            elif self.scheduler is not None:
                self.scheduler.step()
            if self.rank == 0:
                self._record(epoch, lr, stats, result, records)
            self._last_good = epoch
            engine.evaluated()
        return result

    def _skipped(self):
        """Unreadable images left out so far (train and test), over every rank."""
        loaders = (getattr(self.engine, "loader", None), self.test_loader)
        count = sum(len(getattr(loader, "skipped", ())) for loader in loaders)
        if self.comm is not None:
            total = np.array([count], dtype=np.float64)
            count = int(self.comm.allreduce(total, op="sum")[0])
        return count

    def _record(self, epoch, lr, stats, result, records):
        def save(path):
            save_checkpoint(
                path, self.model, self.engine.checkpoint_optimizer, epoch=epoch,
                rng=md_random.get_state(), config=self.record(), run_id=self.run_id,
                scheduler=self.scheduler.state_dict() if self.scheduler else None,
            )  # fmt: skip

        print(epoch_line(epoch, self.config.epochs, stats, result), flush=True)
        if result.get("skipped"):
            print(f"{result['skipped']} unreadable images left out so far", flush=True)
        self.run_dir.record_epoch(save, [epoch_record(epoch, lr, stats, result), *records])
        for record in records:
            if record.get("kind") == "dist":
                print(self.engine.format_record(record), flush=True)


def fit(config: TrainConfig, resume: str | None = None) -> dict | None:
    """Train in this process as ``config`` says; returns the last evaluation.

    The evaluation is a dict: ``loss``, ``acc``, ``images``, ``confusion``
    (None when the checkpoint of ``resume`` already reached ``config.epochs``).
    Data-parallel and other distributed runs: ``minidl.dist.fit``.
    """
    return TrainingRun(config, resume=resume).run()
