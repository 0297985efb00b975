"""Synchronous data parallelism over N processes on this machine (``--workers N``).

The run is started again under ``mpiexec -n N`` as ``sync`` data
parallelism, each process taking ``batch_size / N`` samples of every step
on one BLAS thread: the same updates as one process with the whole batch,
computed on N cores without the interpreter lock. ``fit(config, workers=N)``
hands the ranks its configuration in a file; ``minidl train --workers N``
starts itself again instead.

The job runs in its own process group: SIGTERM, SIGINT or SIGHUP to this
process end the whole job, politely, then after ``GRACE_S`` seconds with
SIGKILL; if this process is killed outright, Linux sends mpiexec SIGTERM.
"""

import ctypes
import os
import pickle
import signal
import subprocess
import sys
import tempfile

from ..train.config import option
from .launch import mpi_unavailable_reason, mpiexec_command

GRACE_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def worker_command(argv, workers):
    """(command, extra environment) that runs ``python argv`` on ``workers`` local processes."""
    reason = mpi_unavailable_reason()
    if reason:
        raise OSError(
            f"{option('workers')} needs MPI: {reason}; without {option('workers')} the run "
            "trains in this one process"
        )
    prefix, env = mpiexec_command(workers)
    return [*prefix, sys.executable, *argv], env


def share_batch(config, workers):
    """``config`` for each of ``workers`` processes: an equal share of every step's batch."""
    if config.batch_size % workers:
        raise ValueError(
            f"{option('batch_size')} {config.batch_size} is not a multiple of "
            f"{option('workers')} {workers}; each worker takes an equal share of every step"
        )
    threads = 1 if config.threads is None else config.threads
    return config.replace(batch_size=config.batch_size // workers, threads=threads)


def fit_on_workers(config, options, resume, workers):
    """``minidl.dist.fit`` on ``workers`` local processes; returns their exit status."""
    config = share_batch(config, workers)
    with tempfile.TemporaryDirectory(prefix="minidl-workers-") as folder:
        path = os.path.join(folder, "run.pickle")
        with open(path, "wb") as handle:  # read back only by the ranks started here
            pickle.dump((config, options, resume), handle)
        return run_workers(*worker_command(["-m", "minidl.dist.workers", path], workers))


def _die_with_parent():
    """In the child: ask Linux to send SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the signal handlers below still cover SIGTERM/SIGINT/SIGHUP


def run_workers(command, env):
    """Run the job ``command`` (with ``env`` added); returns its exit status.

    Stopped by a signal, it ends the whole job and returns 128 + the signal's number.
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
    finished = False
    try:
        code = job.wait()
        finished = not received
    finally:
        if not finished:  # a signal, or an exception here: end the whole job
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


def _signal_group(job, signum):
    try:
        os.killpg(job.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":  # a rank of fit_on_workers
    from .fit import fit

    with open(sys.argv[1], "rb") as handle:
        config, options, resume = pickle.load(handle)
    fit(config, options, resume)
