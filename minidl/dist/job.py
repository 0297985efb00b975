"""Starting MPI and aborting a job.

mpi4py is imported (which initialises MPI) by ``mpi_module()`` only, so
``import minidl`` works without MPI.
"""

import os
import sys
import threading
import time
import traceback

OUTPUT_GRACE_S = 0.5


def mpi_module():
    """``mpi4py.MPI`` (importing it initialises MPI), or a clear error when it is missing."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            "minidl.dist needs mpi4py and an MPI library: pip install minidl[mpi]"
        ) from exc
    return MPI


def install_abort_hooks(mpi_comm):
    """Make an uncaught exception (main thread or other threads) abort every rank.

    Without this, the failing rank exits while the others block forever in
    their next collective. The traceback is printed once, by the failing rank.
    """
    header = (
        f"minidl.dist: uncaught exception on rank {mpi_comm.Get_rank()} "
        f"of {mpi_comm.Get_size()}, aborting all ranks\n"
    )

    def abort(exc_type, exc, tb):
        sys.stderr.write(header + "".join(traceback.format_exception(exc_type, exc, tb)))
        abort_job(mpi_comm, 1)

    sys.excepthook = abort
    threading.excepthook = lambda hook: abort(hook.exc_type, hook.exc_value, hook.exc_traceback)


def abort_job(mpi_comm, code):
    """End every rank of ``mpi_comm``'s job with exit status ``code`` (``MPI_Abort``).

    mpiexec forwards each rank's output asynchronously and discards what it
    has not forwarded when the job is torn down; a rank that printed why it
    aborts therefore flushes and gives it ``OUTPUT_GRACE_S`` first (under load
    the message was seen to vanish without this pause). Never returns: an
    ``MPI_Abort`` may return before the job is torn down (MPICH), and the
    rank must not go on as if nothing happened.
    """
    sys.stderr.flush()
    sys.stdout.flush()
    time.sleep(OUTPUT_GRACE_S)
    try:
        mpi_comm.Abort(code)
    finally:
        os._exit(code or 1)
