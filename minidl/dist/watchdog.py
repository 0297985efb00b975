"""A hang watchdog for MPI jobs: a rank that makes no progress for too long aborts the job.

MPI calls have no timeout: a rank that is stopped (SIGSTOP), deadlocked, or
waiting for such a rank blocks, and then every other rank blocks in its next
collective, for ever. The training code calls ``progress(where)`` whenever it
gets something done (a step, an evaluated batch, a served message); each
rank's ``Watchdog`` thread (which runs while the main thread waits inside
MPI: mpi4py releases the interpreter lock) aborts the job when ``timeout``
seconds pass without a call, saying which rank stalled and where, and (with a
``Heartbeat``) which ranks and hosts stopped answering; rank 0 records that
reason in its run folder (``train/run_status.py``).
"""

import os
import socket
import sys
import threading
import time

from ..train.callbacks import Callback
from ..train.config import option
from ..train.run_status import job_aborted

_last = {"time": time.monotonic(), "where": "start-up"}


def progress(where=None):
    """Record that this rank got something done (cheap: call it once per step)."""
    _last["time"] = time.monotonic()
    if where is not None:
        _last["where"] = where


def idle():
    """(seconds since this rank last called ``progress``, where it was)."""
    return time.monotonic() - _last["time"], _last["where"]


class Watchdog(Callback):
    """Abort the job through ``abort(code)`` (``Communicator.abort``) when ``progress`` was not
    called for ``timeout`` s. As a loop callback, every step and evaluated batch is progress."""

    def __init__(self, timeout, rank, abort, exit_code=124):
        if not timeout > 0:
            raise ValueError(f"watchdog timeout must be positive, got {timeout}")
        self.timeout, self.rank, self.abort, self.exit_code = float(timeout), rank, abort, exit_code
        self.heartbeat = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="minidl-watchdog", daemon=True)

    def after_step(self, where):
        progress(where)

    def start(self):
        progress()
        self._thread.start()
        return self

    def listen(self, heartbeat):
        """Include ``heartbeat``'s report on the other ranks in the message; it is started
        here and stopped with the watchdog."""
        self.heartbeat = heartbeat.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def _watch(self):
        while not self._stop.wait(min(1.0, self.timeout / 10)):
            quiet = idle()[0]
            if quiet > self.timeout:
                self._fire(quiet)
                return

    def _fire(self, quiet):
        others = self.heartbeat.describe(self.timeout) if self.heartbeat is not None else ""
        me = f"rank {self.rank} on {socket.gethostname()}"
        reason = (
            f"{me} made no progress for {quiet:.0f} s (last: {_last['where']}): a rank is "
            f"stopped, deadlocked or far slower than the others; aborting the job.{others}"
        )
        sys.stderr.write(
            f"minidl: {reason} Once it is fixed, continue from the last checkpoint with "
            f"{option('resume')} RUN/checkpoint.npz; if a step can really take this long, "
            f"raise {option('hang_timeout')}\n"
        )
        try:
            job_aborted(reason)
            self.abort(self.exit_code)
        finally:
            os._exit(self.exit_code)
