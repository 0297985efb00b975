"""A run directory: what ``minidl train`` writes, in which order, and how it is never lost.

Files: ``config.json`` (the options and the run id), ``checkpoint.npz``
(after every good epoch), ``metrics.jsonl`` (one record per epoch, plus
distributed and compression records, and an ``"aborted"`` record when minidl
ended the job: ``job_aborted``), ``curves.png`` and, with ``--trace``,
``trace.json``; ``.minidl.lock`` is the folder's lock (``FolderLock``).

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

The lock (``FolderLock``): ``fcntl.flock`` on ``folder/.minidl.lock``, taken without
waiting, so a second process asking for the folder gets ``RunFolderBusy`` at once,
naming the holder's PID and host (which the holder writes into the file). The kernel
drops it when the holder's file is closed, however the process ends, so a dead run never
blocks a folder; a lock counts only while the locked file is still the one at
``.minidl.lock``. ``flock`` is local to one machine's kernel: on a network file system
shared by several machines locks may not exclude each other.

Whether a run finished (``run_status``), for batch scripts and after a lost node: a
launcher does not always say (a node that dies takes its ranks' messages with it), so the
folder does. **finished**: its last epoch record is its ``config.json``'s ``epochs``;
**aborted**: its last record is ``"kind": "aborted"``, written by rank 0 when minidl ended
the run (``job_aborted``), with the reason; **stopped**: neither (killed from outside).
``minidl report --check RUN`` prints one line per run.
"""

import fcntl
import json
import os
import socket
import time
import uuid

from minidl.atomic import atomic_write, remove_stale_parts
from minidl.train.config import OptionMessage, option
from minidl_app.metrics import append_metrics, plot_curves, read_metrics, rewrite_metrics

LOCK_NAME = ".minidl.lock"
HOLDER_WAIT_S = 0.5  # how long a refused process waits for a new holder to write its name


class RunFolderBusy(OptionMessage, OSError):
    """The run folder is being written by another run (its lock is held)."""


class FolderLock:
    """The lock of one run folder; ``held`` while this object holds it."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self._fd = None

    @property
    def held(self):
        return self._fd is not None

    def acquire(self):
        """Take the lock now or raise ``RunFolderBusy``; returns self. The folder must exist."""
        if self._fd is not None:
            return self
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise RunFolderBusy(
                    f"{self.folder} is being written by another run ({holder}); a run folder "
                    f"has one writer at a time: wait until that run ends (or stop it), or "
                    f"choose another {option('out')}"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                self._fd = fd
            else:  # the holder before us removed the file we locked: lock the new one
                os.close(fd)
        text = f"{os.getpid()} {socket.gethostname()}\n".encode()
        os.pwrite(self._fd, text, 0)  # one write: a reader sees the old name or this one, whole
        os.ftruncate(self._fd, len(text))
        return self

    def release(self):
        """Remove the lock file and give the lock up (nothing happens when it is not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.unlink(self.path)  # while still locked: see the module's docstring
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)  # closing the file drops the flock

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def _same_file(fd, path):
    """Whether the open file ``fd`` is the file at ``path`` now."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


def _holder(fd):
    """``PID 123 on host h`` from the lock file, waiting briefly for a holder just starting."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        first = os.pread(fd, 256, 0).decode(errors="replace").partition("\n")[0].split()
        if len(first) == 2:
            return f"PID {first[0]} on host {first[1]}"
        if time.monotonic() > deadline:
            return "PID and host not known yet: it is starting"
        time.sleep(0.01)


RUN_FILES = ("config.json", "checkpoint.npz", "metrics.jsonl", "curves.png", "trace.json")


class RunDirectoryError(OptionMessage, ValueError):
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
        """Create the folder and take its lock (``RunFolderBusy``: another run has it)."""
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


def run_status(path, option=str):
    """(finished, line): whether the run in folder ``path`` finished, and one line saying so
    (an option named ``option(field)``: the command line passes its flags)."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            epochs = json.load(f).get("epochs")
        records = read_metrics(os.path.join(path, "metrics.jsonl"), drop_torn_tail=True)
    except FileNotFoundError:
        return False, f"{path}: no run here (no config.json or metrics.jsonl)"
    done = [r["epoch"] for r in records if r.get("kind") == "epoch"]
    last = done[-1] if done else 0
    checkpoint = os.path.join(path, "checkpoint.npz")
    resume = (
        f"; once the nodes are fixed, continue with {option('resume')} {checkpoint}"
        if os.path.exists(checkpoint)
        else "; no checkpoint was written: start it again"
    )
    if records and records[-1].get("kind") == "aborted":
        return False, f"{path}: aborted after epoch {last} of {epochs}: {records[-1]['reason']}"
    if last == epochs:
        return True, f"{path}: finished, {last} epochs"
    return False, (
        f"{path}: did not finish: stopped after epoch {last} of {epochs} with no record of why "
        f"(its processes were killed: by the launcher after it lost a node, which its output "
        f"names, by the batch system, or by a signal){resume}"
    )
