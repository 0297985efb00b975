"""Starting MPI and aborting a job.

mpi4py is imported (which initialises MPI) by ``mpi_module()`` only, so
``import minidl`` works without MPI.
"""

import os
import socket
import sys
import threading
import time
import traceback

OUTPUT_GRACE_S = 0.5
ABORT_WAIT_S = 10.0  # an MPI_Abort that cannot reach a lost node may block: exit anyway


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
    """Make an uncaught exception (any thread) print its traceback once and abort every rank,
    instead of leaving the others blocked forever in their next collective."""
    header = (
        f"minidl.dist: uncaught exception on rank {mpi_comm.Get_rank()} "
        f"of {mpi_comm.Get_size()} (host {socket.gethostname()}), aborting all ranks\n"
    )

    def abort(exc_type, exc, tb):
        sys.stderr.write(header + "".join(traceback.format_exception(exc_type, exc, tb)))
        abort_job(mpi_comm, 1)

    sys.excepthook = abort
    threading.excepthook = lambda hook: abort(hook.exc_type, hook.exc_value, hook.exc_traceback)


def abort_job(mpi_comm, code):
    """End every rank of ``mpi_comm``'s job with exit status ``code`` (``MPI_Abort``).

    mpiexec discards the output it has not yet forwarded when the job is torn
    down, so the rank flushes and gives it ``OUTPUT_GRACE_S`` first. Never
    returns, even where ``MPI_Abort`` returns before the teardown (MPICH) or
    blocks because a node's link is cut (the process exits after ``ABORT_WAIT_S``).
    """
    sys.stderr.flush()
    sys.stdout.flush()
    time.sleep(OUTPUT_GRACE_S)
    exit_anyway = threading.Timer(ABORT_WAIT_S, os._exit, (code or 1,))
    exit_anyway.daemon = True
    exit_anyway.start()
    try:
        mpi_comm.Abort(code)
    finally:
        os._exit(code or 1)
