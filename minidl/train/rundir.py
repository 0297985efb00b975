"""A run directory: what ``minidl train`` writes, in which order, and how it is never lost.

Files: ``config.json`` (the options and the run id), ``checkpoint.npz``
(after every good epoch), ``metrics.jsonl`` (one record per epoch, plus
distributed and compression records, and an ``"aborted"`` record when minidl
ended the job: ``run_status.py``), ``curves.png`` and, with ``--trace``,
``trace.json``; ``.minidl.lock`` is the folder's lock (``runlock``).

Rules:
- One writer at a time: a run takes the folder's lock before it writes
  anything and holds it to its end; another run asking for the folder
  (new, ``--resume`` or ``--overwrite``) is refused at once, naming the
  holder's PID and host.
- A new run refuses a folder that already holds a run, unless asked to
  ``overwrite`` it (then the old run's files are deleted first). A folder
  with a ``config.json`` and no other run file is a run that never finished
  an epoch: a new run replaces it. Files that are not the run's stay.
- Each run has a run id (written into ``config.json`` and every checkpoint).
  A checkpoint continues in its own folder only when that folder's
  ``config.json`` has the checkpoint's run id (both without one: runs
  written before run ids); otherwise the continued run needs a folder of
  its own (``--out``), so two runs never mix in one folder.
- Each epoch writes the checkpoint first (atomically), then its metrics
  records, then the plot: a crash between the two leaves a checkpoint
  whose epoch has no record yet, never a record whose weights are lost.
- Resuming from epoch E drops the records of later epochs (they were
  trained again from E), a line a crash cut and the record of how the
  last attempt was aborted, so no epoch is recorded twice; temporary
  files of interrupted writes (minidl's own) are removed.
"""

import json
import os
import uuid

from ..atomic import atomic_write, remove_stale_parts
from .config import option
from .metrics import append_metrics, plot_curves, read_metrics, rewrite_metrics
from .runlock import FolderLock

RUN_FILES = ("config.json", "checkpoint.npz", "metrics.jsonl", "curves.png", "trace.json")


class RunDirectoryError(ValueError):
    """A run directory that cannot be used as asked (it holds another run)."""


class RunDirectory:
    """The folder of one training run, written by rank 0 while it holds the folder's lock."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.lock = FolderLock(self.path)

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def checkpoint(self):
        return self.file("checkpoint.npz")

    def existing_files(self):
        return [name for name in RUN_FILES if os.path.exists(self.file(name))]

    def open(self):
        """Create the folder and take its lock (``runlock.RunFolderBusy``: another run has it)."""
        os.makedirs(self.path, exist_ok=True)
        self.lock.acquire()

    def close(self):
        """Give the folder's lock up."""
        self.lock.release()

    def run_id(self):
        """The run id in ``config.json``; None without one (no file, or written before run ids)."""
        try:
            with open(self.file("config.json")) as f:
                config = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return config.get("run_id") if isinstance(config, dict) else None

    def start(self, config, overwrite=False):
        """Prepare the folder for a new run: refuse (or, with ``overwrite``, clear) an old one.

        Returns the new run's id, which ``config.json`` now holds.
        """
        self._check_locked()
        existing = self.existing_files()
        if existing and existing != ["config.json"] and not overwrite:
            resume = (
                f"continue it with {option('resume')} {self.checkpoint}, "
                if os.path.exists(self.checkpoint)
                else ""
            )
            raise RunDirectoryError(
                f"{self.path} already holds a run ({', '.join(existing)}); {resume}replace it "
                f"with {option('overwrite')}, or choose another {option('out')}"
            )
        for name in existing:
            os.remove(self.file(name))
        remove_stale_parts(self.path)
        run_id = uuid.uuid4().hex
        self.write_config(config, run_id)
        return run_id

    def resume(self, checkpoint, epoch, config, run_id):
        """Prepare the folder to continue the run ``run_id`` (the checkpoint's) after ``epoch``.

        Refuses a folder whose run is another's (``checkpoint``: the path, for
        the message); later records and torn lines go.
        """
        self._check_locked()
        mine = self.run_id()
        if mine != run_id:
            why = (
                "it has no config.json"
                if not os.path.exists(self.file("config.json"))
                else "its config.json is of another run"
            )
            raise RunDirectoryError(
                f"{option('resume')} {checkpoint}: the run in {self.path} is not this "
                f"checkpoint's ({why}); continuing there would mix two runs in one folder: "
                f"pass {option('out')} with the folder the continued run goes to"
            )
        remove_stale_parts(self.path)
        metrics = self.file("metrics.jsonl")
        if os.path.exists(metrics):
            records = read_metrics(metrics, drop_torn_tail=True)
            kept = [r for r in records if r.get("epoch", 0) <= epoch and r.get("kind") != "aborted"]
            rewrite_metrics(metrics, kept)
        self.write_config(config, run_id)

    def write_config(self, config, run_id):
        with atomic_write(self.file("config.json")) as f:
            f.write(json.dumps({"run_id": run_id, **config}, indent=2, default=str).encode())

    def record_epoch(self, save_checkpoint, records):
        """Checkpoint (``save_checkpoint(path)``), then the epoch's metrics records, the plot."""
        save_checkpoint(self.checkpoint)
        metrics = self.file("metrics.jsonl")
        append_metrics(metrics, *records)
        plot_curves(read_metrics(metrics), self.file("curves.png"))

    def record_abort(self, epoch, reason):
        """The run ends after ``epoch`` for ``reason``: a last ``"aborted"`` record (one
        whole line; ``run_status`` reads it)."""
        record = {"kind": "aborted", "epoch": epoch, "reason": reason}
        append_metrics(self.file("metrics.jsonl"), record)

    def _check_locked(self):
        if not self.lock.held:
            raise RuntimeError(f"{self.path}: open() the run directory (take its lock) first")
