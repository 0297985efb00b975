"""A run directory: what ``minidl train`` writes, in which order, and how it is never lost.

Files: ``config.json`` (the options), ``checkpoint.npz`` (after every good
epoch), ``metrics.jsonl`` (one record per epoch, plus distributed and
compression records), ``curves.png`` and, with ``--trace``, ``trace.json``.

Rules:
- A new run refuses a folder that already holds a run, unless asked to
  ``overwrite`` it (then the old run's files are deleted first); continuing
  a run is ``--resume``.
- Each epoch writes the checkpoint first (atomically), then its metrics
  records, then the plot: a crash between the two leaves a checkpoint
  whose epoch has no record yet, never a record whose weights are lost.
- Resuming from epoch E drops the records of later epochs (they were
  trained again from E) and a line a crash cut, so no epoch is recorded
  twice; temporary files of interrupted writes are removed.
"""

import json
import os

from ..atomic import atomic_write, remove_stale_parts
from .metrics import append_metrics, plot_curves, read_metrics, rewrite_metrics

RUN_FILES = ("config.json", "checkpoint.npz", "metrics.jsonl", "curves.png", "trace.json")


class RunDirectoryError(ValueError):
    """A run directory that cannot be used as asked (it holds another run)."""


class RunDirectory:
    """The folder of one training run, written by rank 0."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def checkpoint(self):
        return self.file("checkpoint.npz")

    def existing_files(self):
        return [name for name in RUN_FILES if os.path.exists(self.file(name))]

    def start(self, config, overwrite=False):
        """Prepare the folder for a new run: refuse (or, with ``overwrite``, clear) an old one."""
        existing = self.existing_files()
        if existing and not overwrite:
            raise RunDirectoryError(
                f"{self.path} already holds a run ({', '.join(existing)}); continue it with "
                f"--resume {self.checkpoint}, replace it with --overwrite, or choose another --out"
            )
        os.makedirs(self.path, exist_ok=True)
        for name in existing:
            os.remove(self.file(name))
        remove_stale_parts(self.path)
        self.write_config(config)

    def resume(self, epoch, config):
        """Prepare the folder to continue after ``epoch``: later records and torn lines go."""
        os.makedirs(self.path, exist_ok=True)
        remove_stale_parts(self.path)
        metrics = self.file("metrics.jsonl")
        if os.path.exists(metrics):
            records = read_metrics(metrics, drop_torn_tail=True)
            rewrite_metrics(metrics, [r for r in records if r.get("epoch", 0) <= epoch])
        self.write_config(config)

    def write_config(self, config):
        with atomic_write(self.file("config.json")) as f:
            f.write(json.dumps(config, indent=2, default=str).encode())

    def record_epoch(self, save_checkpoint, records):
        """Checkpoint (``save_checkpoint(path)``), then the epoch's metrics records, then the
        plot."""
        save_checkpoint(self.checkpoint)
        metrics = self.file("metrics.jsonl")
        append_metrics(metrics, *records)
        plot_curves(read_metrics(metrics), self.file("curves.png"))
