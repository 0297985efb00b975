"""Launching ranks: Python under ``mpiexec`` with a hard timeout, and ``--workers N``.

``run_mpi`` (tests, examples) must fail on a hung job, not block: on timeout the whole
process group (mpiexec, its proxies and every rank) is killed. With Open MPI, local jobs
ask for what MPICH allows by default: more ranks than cores (``--oversubscribe``) and
running as root (``OMPI_ALLOW_RUN_AS_ROOT``); and they leave out the libfabric transport
(``OMPI_MCA_btl=^ofi``, unless the environment names the transports), whose start-up took
about 1 s of every local job's 1.15 s (Open MPI 5.0) while local ranks talk over shared memory.

``--workers N`` is ``sync`` data parallelism over N processes on this machine, started
again under ``mpiexec -n N``: each takes ``batch_size / N`` samples of every step on one
BLAS thread, the same updates as one process with the whole batch, on N cores without
the interpreter lock. ``fit(config, workers=N)`` hands the ranks its configuration in a
file they read as ``python -m minidl_app.launch PATH``; ``minidl train --workers N``
starts itself again instead. SIGTERM, SIGINT or SIGHUP to this process end the whole
job, politely, then after ``GRACE_S`` seconds with SIGKILL; if this process is killed
outright, Linux sends mpiexec SIGTERM.
"""

import ctypes
import functools
import importlib.util
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

from minidl.train.config import ConfigError, option

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
    env = {} if "OMPI_MCA_btl" in os.environ else {"OMPI_MCA_btl": "^ofi"}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return [path, "--oversubscribe", "-n", str(nprocs)], env


def python_command(nprocs, args):
    """(command, extra environment) that runs this Python with ``args`` on ``nprocs`` ranks."""
    prefix, env = mpiexec_command(nprocs)
    return [*prefix, sys.executable, *map(str, args)], env


def run_mpi(nprocs, args, timeout=60.0, env=None):
    """Run ``mpiexec -n nprocs python *args``; returns an ``MpiRun``.

    ``env`` entries are added to the current environment. The job runs in its
    own session, so a timeout kills the job's processes and nothing else.
    """
    reason = mpi_unavailable_reason()
    if reason:
        raise RuntimeError(f"cannot start an MPI job: {reason}")
    command, mpi_env = python_command(nprocs, args)
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


# ---- --workers N -----------------------------------------------------------------------------
GRACE_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def worker_command(argv, workers):
    """(command, extra environment) that runs ``python argv`` on ``workers`` local processes."""
    reason = mpi_unavailable_reason()
    if reason:
        raise ConfigError(
            f"{option('workers')} needs MPI: {reason}; without {option('workers')} the run "
            "trains in this one process"
        )
    return python_command(workers, argv)


def share_batch(config, workers):
    """``config`` for each of ``workers`` processes: an equal share of every step's batch."""
    if config.batch_size % workers:
        raise ConfigError(
            f"{option('batch_size')} {config.batch_size} is not a multiple of "
            f"{option('workers')} {workers}; each worker takes an equal share of every step"
        )
    threads = 1 if config.threads is None else config.threads
    return config.replace(batch_size=config.batch_size // workers, threads=threads)


def fit_on_workers(config, options, resume, workers, option=str):
    """``minidl.dist.fit`` on ``workers`` local processes; returns their exit status.
    ``option`` is ``fit``'s, handed to the ranks pickled (a module-level function)."""
    config = share_batch(config, workers)
    with tempfile.TemporaryDirectory(prefix="minidl-workers-") as folder:
        path = os.path.join(folder, "run.pickle")
        with open(path, "wb") as handle:  # read back only by the ranks started here
            pickle.dump((config, options, resume, option), handle)
        return run_workers(*worker_command(["-m", "minidl_app.launch", path], workers))


def _die_with_parent():
    """In the child: ask Linux to send SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the signal handlers below still cover SIGTERM/SIGINT/SIGHUP


def run_workers(command, env):
    """Run the job ``command`` (with ``env`` added); returns its exit status.

    Stopped by a signal, it forwards it to the job's group, gives the job ``GRACE_S`` to end,
    then kills what is left, and returns 128 + the signal's number.
    """
    job = subprocess.Popen(
        command,
        env={**os.environ, **env},
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    received = []

    def forward(signum, frame):
        received.append(signum)
        _signal_group(job, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    code = None
    try:
        code = _wait(job, received)
    finally:
        if received or code is None:  # a signal, or an exception here: end the whole job
            if not received:  # the job has not been asked yet
                _signal_group(job, signal.SIGTERM)
                try:
                    job.wait(timeout=GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
            _signal_group(job, signal.SIGKILL)  # what is left, ranks that outlived mpiexec too
            job.wait()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        print(
            f"minidl train: stopped by {signal.Signals(received[0]).name}; every worker "
            "process was ended",
            file=sys.stderr,
        )
        return 128 + received[0]
    return code


def _wait(job, received):
    """The job's exit status; None once it outlives ``GRACE_S`` after a forwarded signal
    (a rank that swallowed it keeps the others waiting in a collective)."""
    while not received:
        try:
            return job.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
    try:
        return job.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        return None


def _signal_group(job, signum):
    try:
        os.killpg(job.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":  # a rank of fit_on_workers
    from .run import dist_fit as fit

    # Ctrl-C ends a rank at once: a KeyboardInterrupt raised inside a __del__ is only
    # printed, and the rank would train on while the others wait for it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    with open(sys.argv[1], "rb") as handle:
        config, options, resume, namer = pickle.load(handle)
    fit(config, options, resume, option=namer)
