"""``minidl train --workers N``: synchronous data parallelism over N processes on this machine.

The run is started again under ``mpiexec -n N`` as ``--dist sync``, each
process taking ``batch-size / N`` samples of every step on one BLAS thread:
the same updates as one process with the whole batch (the invariant of
synchronous data parallelism), computed on N cores without the interpreter
lock that keeps threads of one Python process from running in parallel.

The job runs in its own process group, which this process owns: SIGTERM,
SIGINT or SIGHUP to it end the whole job (mpiexec and every rank), first
politely, then, after ``GRACE_S`` seconds, with SIGKILL; and if this process
is killed outright, the kernel sends mpiexec SIGTERM (Linux), so no rank is
left behind.
"""
import ctypes
import os
import signal
import subprocess
import sys

from ..dist.launch import mpi_unavailable_reason, mpiexec_command

GRACE_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _without(argv, flag):
    """``argv`` without ``flag VALUE`` or ``flag=VALUE``."""
    out, skip = [], False
    for i, item in enumerate(argv):
        if skip:
            skip = False
        elif item == flag:
            skip = True
        elif not item.startswith(flag + "="):
            out.append(item)
    return out


def worker_command(argv, workers, batch_size, threads_given):
    """(command, extra environment) that runs ``minidl train argv`` on ``workers`` processes."""
    if batch_size % workers:
        raise ValueError(f"--batch-size {batch_size} is not a multiple of --workers {workers}; "
                         "each worker takes an equal share of every step")
    reason = mpi_unavailable_reason()
    if reason:
        raise OSError(f"--workers needs MPI: {reason}; without --workers the run trains in this "
                      "one process")
    rest = _without(_without(argv, "--workers"), "--batch-size")
    extra = ["--dist", "sync", "--batch-size", str(batch_size // workers)]
    if not threads_given:
        extra += ["--threads", "1"]
    prefix, env = mpiexec_command(workers)
    return [*prefix, sys.executable, "-m", "minidl", "train", *rest, *extra], env


def _die_with_parent():
    """In the child: ask Linux to send SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the signal handlers below still cover SIGTERM/SIGINT/SIGHUP


def run_workers(argv, workers, batch_size, threads_given):
    """Run the training on ``workers`` local processes; returns their exit status.

    Stopped by a signal, it ends the whole job and returns 128 + the signal's number.
    """
    command, env = worker_command(argv, workers, batch_size, threads_given)
    job = subprocess.Popen(command, env={**os.environ, **env}, start_new_session=True,
                           preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
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
        print(f"minidl train: stopped by {signal.Signals(received[0]).name}; every worker "
              "process was ended", file=sys.stderr)
        return 128 + received[0]
    return code


def _signal_group(job, signum):
    try:
        os.killpg(job.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
