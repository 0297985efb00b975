"""A training run with its run folder: what ``minidl train``, ``minidl.train.fit`` and
``minidl.dist.fit`` run.

``FolderRun`` is the library's ``TrainingRun`` plus the folder it writes (``rundir``): rank 0
takes the folder's lock at ``begin`` and, after every good epoch, writes the checkpoint (the
serial model, streamed from the layout's shares), the epoch's metrics records and the plot,
in that order. A resumed run checks that the checkpoint is the same run and applies and
announces what changed (``resume``); a distributed one gets a hang watchdog (``watchdog``).
A diverged epoch writes nothing: the checkpoint of the last good epoch stays the newest,
and the folder records why the run ended.
"""

import os

from minidl import random as md_random
from minidl.dist.comm import init
from minidl.dist.config import DistConfig
from minidl.dist.job import job_aborted, when_aborted
from minidl.dist.parallelize import parallelize
from minidl.train.callbacks import Diverged
from minidl.train.checkpoint import save_checkpoint
from minidl.train.config import TrainConfig, worded
from minidl.train.loop import train_epochs
from minidl.train.run import TrainingRun

from .launch import fit_on_workers
from .resume import apply_changes, changes, check_fixed
from .rundir import RunDirectory
from .watchdog import Heartbeat, Watchdog, idle, progress


def epoch_record(epoch, lr, stats, result):
    record = {
        "kind": "epoch",
        "epoch": epoch,
        "lr": lr,
        "train_loss": stats["loss"],
        "train_acc": stats["acc"],
        "test_loss": result["loss"],
        "test_acc": result["acc"],
        "test_top1_error": 1.0 - result["acc"],
        "test_top5_error": 1.0 - result["top5_acc"],
        "train_images": stats["images"],
        "test_images": result["images"],
        "seconds": stats["seconds"],
        "images_per_s": stats["images_per_s"],
    }
    if "skipped" in result:
        record["skipped_images"] = result["skipped"]
    return record


class FolderRun(TrainingRun):
    """``TrainingRun`` writing its run folder ``out`` (module doc). Leaving the ``with`` block
    gives up the folder's lock however the run ends; a ``Diverged`` leaves it naming the
    checkpoint it kept."""

    progress = staticmethod(progress)

    def __init__(self, config: TrainConfig, comm=None, resume=None, option=str):
        self.run_id = self._forget = None
        self._last_good = 0
        super().__init__(config, comm, resume, option)
        self.run_dir = RunDirectory(self.out)

    def _checkpoint(self, path):
        checkpoint = super()._checkpoint(path)
        self.saved = checkpoint.training_config()
        if self.saved is not None:
            check_fixed(self.saved, self.config.record())
        return checkpoint

    def record(self):
        """The options worth keeping with the run (``config.json`` and the checkpoint)."""
        # world_size: the processes sharing each step's samples (a layout may say fewer)
        options = self.training.options if self.training is not None else {}
        return self.config.record() | {"world_size": self.size} | options

    def begin(self, training):
        """The library's ``begin``, then rank 0 takes and prepares the run folder."""
        super().begin(training)
        self._last_good = self.start_epoch
        self._start_run_directory()

    def _load(self, checkpoint):
        """The checkpoint's states in place, then what changed since applied and announced."""
        changed, notes = changes(self.saved, self.record())
        if self.rank == 0:
            for note in notes:
                print(f"resume: {worded(note, self.option)}", flush=True)
        epoch = super()._load(checkpoint)
        if self.training.schedulable is not None:  # the optimizer the schedule drives
            apply_changes(self.config, changed, self.training.schedulable, self.scheduler)
        return epoch

    def _start_run_directory(self):
        """Rank 0 takes the folder's lock (refused at once when another run holds it: under
        MPI the error ends the job), then prepares it: the checkpoint's own run continued, or
        a new run."""
        if self.rank != 0:
            return
        self.run_dir.open()
        resume, checkpoint = self.resume, self.checkpoint
        saved_id = checkpoint.meta.get("run_id") if checkpoint is not None else None
        in_place = resume and os.path.abspath(self.out) == os.path.dirname(os.path.abspath(resume))
        if in_place and not (self.config.overwrite and self.run_dir.run_id() != saved_id):
            self.run_dir.resume(resume, self.start_epoch, self.record(), saved_id)
            self.run_id = saved_id
        else:
            self.run_id = self.run_dir.start(self.record(), overwrite=self.config.overwrite)

    def watchdogs(self, options):
        """A watchdog ending the job when a rank makes no progress for ``--hang-timeout`` s."""
        comm = self.comm
        if comm.size == 1 or options.hang_timeout <= 0:
            return []
        watchdog = Watchdog(options.hang_timeout, comm.rank, comm.abort, option=self.option)
        watchdog.start().listen(Heartbeat(comm, idle))  # after start: its exchange may hang too
        return [watchdog]

    def __enter__(self):
        if self.rank == 0:
            self._forget = when_aborted(
                lambda reason: self.run_dir.record_abort(self._last_good, reason)
            )
        return self

    def __exit__(self, kind, exc, traceback):
        message = None
        try:
            super().__exit__(kind, exc, traceback)
            if isinstance(exc, Diverged):
                kept = (
                    f"the checkpoint of epoch {self._last_good} is kept ({self.run_dir.checkpoint})"
                    if self._last_good
                    else "no checkpoint was written"
                )
                message = f"{exc.message}; {kept}"
                job_aborted(worded(message, self.option))  # rank 0 records it in the run folder
        finally:
            if self._forget is not None:
                self._forget()
            self.run_dir.close()
        if message is not None:
            raise Diverged(message) from None

    def record_epoch(self, epoch, lr, stats, result, records):
        """Print the epoch, then rank 0 writes the checkpoint, the records and the plot (the
        layout's shares stream to rank 0 entry by entry: every rank takes part)."""
        training, state = self.training, None
        placement = training.placement
        model = placement.model_state() if placement else training.model.state_dict().items()
        if training.checkpoints_optimizer:
            state = training.optimizer.state_dict() if training.optimizer is not None else None
            state = placement.optimizer_state(state) if placement else state
        super().record_epoch(epoch, lr, stats, result, records)
        if self.rank == 0:

            def save(path):
                save_checkpoint(
                    path,
                    model,
                    state,
                    epoch=epoch,
                    rng=md_random.get_state(),
                    config=self.record(),
                    run_id=self.run_id,
                    scheduler=self.scheduler.state_dict() if self.scheduler else None,
                )

            self.run_dir.record_epoch(save, [epoch_record(epoch, lr, stats, result), *records])
        else:
            for _ in model:
                pass
            for _ in state["state"] if state is not None else ():
                pass
        self._last_good = epoch

    def final_line(self, result):
        line = super().final_line(result)
        return line if result is None else f"{line}; run directory: {self.out}"


def fit(config: TrainConfig, resume: str | None = None, *, option=str) -> dict | None:
    """``minidl.train.fit``: train in this process as ``config`` says; returns the last
    evaluation.

    The evaluation is a dict: ``loss``, ``acc``, ``images``, ``confusion``
    (None when the checkpoint of ``resume`` already reached ``config.epochs``).
    ``option(field)`` names an option in what it prints (the command line passes its flags).
    Data-parallel and other distributed runs: ``minidl.dist.fit``.
    """
    with FolderRun(config, resume=resume, option=option) as run:
        return train_epochs(run, run.local_training())


def dist_fit(
    config: TrainConfig,
    options: DistConfig | None = None,
    resume: str | None = None,
    workers: int = 1,
    *,
    option=str,
) -> dict | int | None:
    """``minidl.dist.fit``: train as ``config`` and ``options`` say on every rank; returns the
    last evaluation.

    Call it on every rank of an ``mpiexec`` job; or, with ``workers=N`` in a
    plain process, it starts N local ranks of ``sync`` data parallelism and
    returns their exit status (0: finished). ``options`` defaults to ``sync``
    with the default options; ``resume`` is a checkpoint to continue from.
    ``option(field)`` names an option in what it prints (the command line passes its flags).
    """
    options = (options if options is not None else DistConfig()).check(config, resume)
    if workers > 1:
        if options.mode.name != "sync":
            raise ValueError(
                f"workers={workers} runs sync data parallelism, not {options.mode.text}"
            )
        return fit_on_workers(config, options, resume, workers, option)
    comm = init()
    if options.grid is not None:
        options.grid.check_fits(comm.size)
    comm.auto = "rule" if config.deterministic else "measure"
    with FolderRun(config, comm, resume, option) as run:
        return train_epochs(run, parallelize(run, options))
