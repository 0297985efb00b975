"""A hang watchdog for MPI jobs: a rank that makes no progress for too long aborts the job.

MPI calls have no timeout: a rank that is stopped (SIGSTOP), deadlocked, or
waiting for a message from such a rank blocks, and every other rank then
blocks in its next collective, for ever. Each rank of a training run runs a
``Watchdog`` thread; the training code calls ``progress(where)`` whenever it
gets something done (a step, an evaluated batch, a served message). When
``timeout`` seconds pass without a call, the watchdog prints which rank
stalled and what it did last, then aborts the job (``MPI_Abort``), so that
mpiexec ends every rank, the stopped one included. The thread can run while
the main thread waits inside MPI, because mpi4py releases Python's
interpreter lock during blocking calls.
"""

import os
import sys
import threading
import time

from ..train.callbacks import Callback
from ..train.config import option

_last = {"time": time.monotonic(), "where": "start-up"}


def progress(where=None):
    """Record that this rank got something done (cheap: call it once per step)."""
    _last["time"] = time.monotonic()
    if where is not None:
        _last["where"] = where


class Watchdog(Callback):
    """Abort the job through ``abort(code)`` when ``progress`` was not called for ``timeout`` s.

    As a loop callback, every step and evaluated batch counts as progress.

    ``abort`` is ``Communicator.abort``, which flushes the message and ends every rank.
    """

    def __init__(self, timeout, rank, abort, exit_code=124):
        if not timeout > 0:
            raise ValueError(f"watchdog timeout must be positive, got {timeout}")
        self.timeout, self.rank, self.abort, self.exit_code = float(timeout), rank, abort, exit_code
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="minidl-watchdog", daemon=True)

    def after_step(self, where):
        progress(where)

    def start(self):
        progress()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self):
        while not self._stop.wait(min(1.0, self.timeout / 10)):
            idle = time.monotonic() - _last["time"]
            if idle > self.timeout:
                self._fire(idle)
                return

    def _fire(self, idle):
        sys.stderr.write(
            f"minidl: rank {self.rank} made no progress for {idle:.0f} s (last: {_last['where']}): "
            "a rank is stopped, deadlocked or far slower than the others; aborting the job. "
            f"If a step can really take this long, raise {option('hang_timeout')}\n"
        )
        try:
            self.abort(self.exit_code)
        finally:
            os._exit(self.exit_code)
