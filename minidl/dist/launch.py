"""Start Python under ``mpiexec`` from Python (tests, examples, ``--workers``), with a hard timeout.

A hung MPI job must fail, not block: on timeout the whole process group
(mpiexec, its proxies and every rank) is killed. With Open MPI, local jobs
ask for what MPICH allows by default: more ranks than cores
(``--oversubscribe``) and running as root (``OMPI_ALLOW_RUN_AS_ROOT``).
"""

import functools
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
    """``mpiexec`` next to this Python (a venv with the ``mpich`` wheel), else on PATH, or None."""
    return shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


def mpi_unavailable_reason():
    """Why MPI jobs cannot run here (None when they can)."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install minidl[mpi])"
    if mpiexec_path() is None:
        return "no mpiexec found next to the Python interpreter or on PATH"
    return None


@functools.lru_cache(maxsize=4)
def mpiexec_flavor(path):
    """``"openmpi"`` or ``"mpich"`` (anything else counts as MPICH), from ``mpiexec --version``."""
    try:
        text = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "mpich"
    return "openmpi" if any(s in text for s in ("Open MPI", "OpenRTE", "PRRTE")) else "mpich"


def mpiexec_command(nprocs):
    """(argv prefix, extra environment) that starts ``nprocs`` local ranks with this MPI."""
    path = mpiexec_path()
    if mpiexec_flavor(path) != "openmpi":
        return [path, "-n", str(nprocs)], {}
    env = {}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return [path, "--oversubscribe", "-n", str(nprocs)], env


def run_mpi(nprocs, args, timeout=60.0, env=None):
    """Run ``mpiexec -n nprocs python *args``; returns an ``MpiRun``.

    ``env`` entries are added to the current environment. The job runs in its
    own session, so a timeout kills the job's processes and nothing else.
    """
    reason = mpi_unavailable_reason()
    if reason:
        raise RuntimeError(f"cannot start an MPI job: {reason}")
    prefix, mpi_env = mpiexec_command(nprocs)
    command = [*prefix, sys.executable, *map(str, args)]
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **mpi_env, **(env or {})},
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        timed_out = True
    return MpiRun(process.returncode, output, time.perf_counter() - start, timed_out)
