"""``minidl train --workers N``: synchronous data parallelism over N processes on this machine.

The run is started again under ``mpiexec -n N`` as ``--dist sync``, each
process taking ``batch-size / N`` samples of every step on one BLAS thread:
the same updates as one process with the whole batch (the invariant of
synchronous data parallelism), computed on N cores without the interpreter
lock that keeps threads of one Python process from running in parallel.
"""
import subprocess
import sys

from ..dist.launch import mpi_unavailable_reason, mpiexec_path


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
    """The mpiexec command line that runs ``minidl train argv`` on ``workers`` processes."""
    if batch_size % workers:
        raise SystemExit(f"minidl train: --batch-size {batch_size} is not a multiple of "
                         f"--workers {workers}; each worker takes an equal share of every step")
    reason = mpi_unavailable_reason()
    if reason:
        raise SystemExit(f"minidl train: --workers needs MPI: {reason}")
    rest = _without(_without(argv, "--workers"), "--batch-size")
    extra = ["--dist", "sync", "--batch-size", str(batch_size // workers)]
    if not threads_given:
        extra += ["--threads", "1"]
    return [mpiexec_path(), "-n", str(workers), sys.executable, "-m", "minidl", "train",
            *rest, *extra]


def run_workers(argv, workers, batch_size, threads_given):
    """Run the training on ``workers`` local processes; returns their exit status."""
    return subprocess.call(worker_command(argv, workers, batch_size, threads_given))
