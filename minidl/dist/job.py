"""Starting MPI and aborting a job.

mpi4py is imported (which initialises MPI) by ``mpi_module()`` only, so
``import minidl`` works without MPI; ``mpiexec_ranks()`` and ``mpiexec_rank()`` read
what the launcher set before MPI starts.
"""

import os
import socket
import sys
import threading
import time
import traceback

import numpy as np

OUTPUT_GRACE_S = 0.5
ABORT_WAIT_S = 10.0  # an MPI_Abort that cannot reach a lost node may block: exit anyway


def pmi_for_slurm(environ):
    """Have a rank that ``srun --mpi=pmi2`` started (``PMI_FD`` and ``SLURM_STEP_ID`` in
    ``environ``) speak MPICH's PMI-1 to SLURM (``MPIR_CVAR_PMI_VERSION=1``, unless set): with
    MPICH's default, SLURM's PMI-2 server now and then misreads the start-up messages of the
    address exchange ("mpi/pmi2: value not properly terminated in client request") and the
    ranks fail or wait forever; with PMI-1 it does so more rarely (docs/cluster.md)."""
    if "PMI_FD" in environ and "SLURM_STEP_ID" in environ:
        environ.setdefault("MPIR_CVAR_PMI_VERSION", "1")


def mpi_module():
    """``mpi4py.MPI`` (importing it initialises MPI), or a clear error when it is missing."""
    pmi_for_slurm(os.environ)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            "minidl.dist needs mpi4py and an MPI library: pip install minidl[mpi]"
        ) from exc
    return MPI


def _launcher_number(names, default):
    """The first of the environment variables ``names`` (MPICH's, Open MPI's) that holds a count."""
    for name in names:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return default


def mpiexec_ranks():
    """How many ranks mpiexec started (from the launcher's environment), 1 outside mpiexec."""
    return _launcher_number(("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"), 1)


def mpiexec_rank():
    """This process's rank as mpiexec set it (before MPI is initialised), 0 outside mpiexec."""
    return _launcher_number(("PMI_RANK", "OMPI_COMM_WORLD_RANK"), 0)


_job = {}  # the world communicator, every rank's host, the error line's (install_abort_hooks)
REPORT_WAIT_S = 2.0  # how long a failing rank waits to hear whether every rank failed alike
REPORT_BYTES = 4096  # of an error line, as the ranks compare them


def install_abort_hooks(mpi_comm):
    """Make an uncaught exception (any thread) print its traceback once and abort every rank,
    instead of leaving the others blocked forever in their next collective.

    Collective: it gathers every rank's host, which ``abort_if_peer_failed`` names.
    """
    rank, hosts = mpi_comm.Get_rank(), mpi_comm.allgather(socket.gethostname())
    _job.update(comm=mpi_comm, hosts=hosts, reports=mpi_comm.Dup())
    header = (
        f"minidl.dist: uncaught exception on rank {rank} "
        f"of {mpi_comm.Get_size()} (host {hosts[rank]}), aborting all ranks\n"
    )

    def abort(exc_type, exc, tb):
        abort_if_peer_failed(exc)
        sys.stderr.write(header + "".join(traceback.format_exception(exc_type, exc, tb)))
        abort_job(mpi_comm, 1)

    sys.excepthook = abort
    threading.excepthook = lambda hook: abort(hook.exc_type, hook.exc_value, hook.exc_traceback)


def report_once(message, stream=None):
    """Print an error ``message`` once for the job. When every rank reports within
    ``REPORT_WAIT_S`` (one flag, grid or file wrong for all), rank 0 prints each distinct
    line once, naming the ranks of a line that not all of them share; a rank that fails
    alone prints its own, naming itself. Outside an MPI job: just print it."""
    stream = stream or sys.stderr
    comm = _job.get("reports")
    if comm is None or comm.Get_size() == 1:
        print(message, file=stream, flush=True)
        return
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = np.zeros(REPORT_BYTES, np.uint8)
    text = np.frombuffer(message.encode()[:REPORT_BYTES], np.uint8)
    mine[: text.size] = text
    everyone = np.zeros((size, REPORT_BYTES), np.uint8)
    request, deadline = comm.Iallgather(mine, everyone), time.monotonic() + REPORT_WAIT_S
    while not request.Test():
        if time.monotonic() > deadline:
            print(f"rank {rank}: {message}", file=stream, flush=True)
            return
        time.sleep(0.01)
    if rank != 0:
        return
    ranks = {}
    for r, row in enumerate(everyone):
        ranks.setdefault(row.tobytes().rstrip(b"\0").decode(errors="replace"), []).append(r)
    for line, which in ranks.items():
        if len(ranks) > 1:  # lines that differ name their ranks
            line = f"rank{'s' if len(which) > 1 else ''} {', '.join(map(str, which))}: {line}"
        print(line, file=stream, flush=True)


def abort_if_peer_failed(exc, option=str):
    """End the job if ``exc`` is MPI's report that a peer's process failed; else return.

    MPI raises ``MPI_ERR_PROC_FAILED`` where the launcher keeps the other ranks
    running when one dies (Open MPI run with ``--with-ft ulfm``). The message names
    the dead ranks and their hosts and what to do (an option named ``option(field)``), and
    ``job_aborted`` records it (rank 0 in its run folder, so call this before the run folder
    is closed).
    """
    reason = _failed_peers_reason(exc) if _job else None
    if reason is None:
        return
    sys.stderr.write(
        f"minidl: {reason} Once it is fixed, continue from the last checkpoint with "
        f"{option('resume')} RUN/checkpoint.npz\n"
    )
    try:
        job_aborted(reason)
    finally:
        abort_job(_job["comm"], 1)


def _failed_peers_reason(exc):
    MPI = mpi_module()
    failed_class = getattr(MPI, "ERR_PROC_FAILED", None)
    if not (isinstance(exc, MPI.Exception) and exc.Get_error_class() == failed_class):
        return None
    comm, hosts = _job["comm"], _job["hosts"]
    try:
        failed = comm.Get_failed()
        dead = MPI.Group.Translate_ranks(failed, range(failed.Get_size()), comm.Get_group())
    except (MPI.Exception, NotImplementedError):  # an MPI without MPIX_Comm_get_failed
        dead = []
    names = ", ".join(f"rank {r} on {hosts[r]}" for r in dead) or "a rank"
    where = ", ".join(sorted({hosts[r] for r in dead})) or "the nodes"
    return (
        f"rank {comm.Get_rank()} on {hosts[comm.Get_rank()]}: MPI reports that a peer's "
        f"process failed; aborting the job. Not answering: {names}: its process died; "
        f"check {where}."
    )


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


_when_aborted = []


def when_aborted(record):
    """Have ``record(reason)`` called when this process ends the job (``job_aborted``);
    returns a function that undoes it. Rank 0 records the reason in its run folder."""
    _when_aborted.append(record)
    return lambda: _when_aborted.remove(record)


def job_aborted(reason):
    """This process is about to end the job for ``reason``: record it where asked."""
    for record in list(_when_aborted):
        try:
            record(reason)
        except Exception:  # an abort must go on, whatever the disk says
            pass
