"""Start a Python script under ``mpiexec`` from Python (tests, examples), with a hard timeout.

A hung MPI job must fail, not block: on timeout the whole process group
(mpiexec, its proxies and every rank) is killed.
"""
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import namedtuple

MpiRun = namedtuple("MpiRun", "returncode output seconds timed_out")
MpiRun.__doc__ = "Exit status, stdout and stderr merged, wall seconds, whether it was killed."


def mpiexec_path():
    """``mpiexec`` next to this Python (a venv with the ``mpich`` wheel), else on PATH, else None."""
    return (shutil.which("mpiexec", path=os.path.dirname(sys.executable))
            or shutil.which("mpiexec"))


def mpi_unavailable_reason():
    """Why MPI jobs cannot run here (None when they can)."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install minidl[mpi])"
    if mpiexec_path() is None:
        return "no mpiexec found next to the Python interpreter or on PATH"
    return None


def run_mpi(nprocs, args, timeout=60.0, env=None):
    """Run ``mpiexec -n nprocs python *args``; returns an ``MpiRun``.

    ``env`` entries are added to the current environment. The job runs in its
    own session, so a timeout kills the job's processes and nothing else.
    """
    reason = mpi_unavailable_reason()
    if reason:
        raise RuntimeError(f"cannot start an MPI job: {reason}")
    command = [mpiexec_path(), "-n", str(nprocs), sys.executable, *map(str, args)]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env={**os.environ, **(env or {})}, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        timed_out = True
    return MpiRun(process.returncode, output, time.perf_counter() - start, timed_out)
