"""Run MPI exercise checks on every rank and report per rank (started by the grader under mpiexec).

    mpiexec -n 3 python -m minidl_course.mpi_runner REPORT_FILE MODULE:KEY=TIMEOUT [...]

Each ``MODULE:KEY=TIMEOUT`` names a check's module (imported to register it),
its exercise id (or a hidden check's key, ``6.1:NAME``), and the seconds it
may take on a rank. Every rank runs ``check(comm)`` for each id in order,
waits for the other ranks before the next check (so the messages of two
checks never mix), and appends one line per check to REPORT_FILE, ``MINIDL-EXERCISE
{"id", "rank", "status", "message", "seconds", "values"}`` (``values``: the digest of what a
failure compared on that rank; while grading, a pass adds ``evidence``, its comparisons on
that rank: ``minidl_course.evidence``): a failure as soon as it
happens, a pass once every rank is through. A file, not stdout: what
mpiexec has not yet forwarded from a rank's stdout is lost when the job is
killed, a written line is not.

A check may end the job with ``comm.mpi.Abort`` when one rank fails; that
rank reports the exception it was handling, and its ``Abort`` never returns
(MPICH's may, and the check would go on as if nothing happened). Two ways
out of a hang:

- a watchdog per check: a rank still inside the check, or still waiting for
  the others, when the exercise's timeout passes reports ``timed_out`` and
  exits, which ends the job;
- a rank whose check raised waits ``PEER_GRACE_S`` (at most the timeout)
  for the others, then aborts the job: they are most likely waiting for a
  message it will never send, and its verdict is already reported.
"""

import dataclasses
import faulthandler
import importlib
import json
import os
import sys
import threading
import time

from minidl.exercises import registered

from .evidence import encode
from .grader import EVIDENCE_VARIABLE, EXIT, READY, REPORT, invoke, outcome, stuck_line

POLL_S = 0.002  # how often a rank that has finished a check looks whether the others have
PEER_GRACE_S = 10.0  # how long a rank whose check raised waits for the others before aborting


_report_path = None


def write_line(text):
    """Append one line to the report file (one ``write``: lines of several ranks never mix)."""
    data = (text + "\n").encode()
    fd = os.open(_report_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def report(exercise_id, rank, status, message, seconds, values="", evidence=None):
    """Append this rank's verdict of a check (``values``: the digest its failure carries;
    ``evidence``: a pass's comparisons, while grading)."""
    item = {
        "id": exercise_id,
        "rank": rank,
        "status": status,
        "message": message,
        "seconds": seconds,
        "values": values,
    }
    if evidence is not None:
        item["evidence"] = evidence
    write_line(REPORT + json.dumps(item))


def _watchdog(exercise, rank, start, state):
    """Report a hang of ``exercise`` on this rank (with the line it waits on, and every
    thread's stack on stderr by ``faulthandler``) and end the job after its timeout."""
    main = threading.get_ident()

    def fire():
        where = (
            "finished the check, then waited for the other ranks"
            if state["done"]
            else ", ".join(filter(None, ["still in the check", stuck_line(exercise.path, main)]))
        )
        faulthandler.dump_traceback(all_threads=True)
        report(
            exercise.key,
            rank,
            "timed_out",
            f"{where} after {exercise.timeout:g} s",
            time.perf_counter() - start,
        )
        sys.stderr.flush()
        EXIT(124)

    timer = threading.Timer(exercise.timeout, fire)
    timer.daemon = True
    timer.start()
    return timer


def _abort_never_returns(comm, running):
    """Make ``comm.mpi.Abort`` (also minidl's abort hooks) report this rank's verdict and exit.

    A check may abort the job when one of its ranks fails. MPICH's
    ``MPI_Abort`` can return before the job is torn down, and the check
    would then go on and might be reported as passed. ``running`` holds the
    exercise being checked and its start time.
    """
    from minidl.dist.job import install_abort_hooks

    base = type(comm.mpi)

    class AbortingComm(base):
        def Abort(self, errorcode=0):
            exc = sys.exc_info()[1]  # set when called from an ``except`` block, as checks do
            if exc is not None and running:
                status, message = outcome(running["exercise"], exc)
                report(
                    running["exercise"].key,
                    comm.rank,
                    status,
                    message,
                    time.perf_counter() - running["start"],
                    getattr(exc, "values", ""),
                )
            sys.stdout.flush()
            sys.stderr.flush()
            base.Abort(self, errorcode)
            EXIT(errorcode or 1)

    comm.mpi = AbortingComm(comm.mpi)
    install_abort_hooks(comm.mpi)


def _wait_for_others(comm, limit):
    """A barrier that sleeps between polls (a blocking one would spin on the cores the others
    need); False when the others have not all arrived within ``limit`` seconds."""
    request, deadline = comm.mpi.Ibarrier(), time.perf_counter() + limit
    while not request.Test():
        if time.perf_counter() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def main(argv):
    global _report_path
    import minidl as md

    _report_path, targets = argv[0], []
    for arg in argv[1:]:
        spec, _, timeout = arg.rpartition("=")
        module, _, key = spec.partition(":")
        importlib.import_module(module)
        targets.append(dataclasses.replace(registered(key), timeout=float(timeout)))
    comm, running = md.dist.init(), {}
    noting = os.environ.get(EVIDENCE_VARIABLE) == "1"
    _abort_never_returns(comm, running)
    write_line(f"{READY} rank {comm.rank}")
    for exercise in targets:
        start, state = time.perf_counter(), {"done": False}
        running.update(exercise=exercise, start=start)
        timer = _watchdog(exercise, comm.rank, start, state)
        items = [] if noting else None
        try:
            invoke(exercise, comm, evidence=items)
            exc = None
        except Exception as error:  # noqa: BLE001 -- every failure becomes this rank's verdict
            exc = error
        status, message = outcome(exercise, exc)
        state["done"] = True
        if exc is not None:  # reported now, so that it survives the others hanging
            seconds = time.perf_counter() - start
            report(exercise.key, comm.rank, status, message, seconds, getattr(exc, "values", ""))
        grace = float("inf") if exc is None else min(PEER_GRACE_S, exercise.timeout)
        if not _wait_for_others(comm, grace):
            report(
                exercise.key,
                comm.rank,
                "timed_out",
                f"the other ranks were still in the check {grace:g} s after this rank's failure",
                time.perf_counter() - start,
            )
            comm.mpi.Abort(1)
        if exc is None:  # reported once every rank is through: a rank that aborted never is
            seconds = time.perf_counter() - start
            evidence = encode(items) if noting else None
            report(exercise.key, comm.rank, status, message, seconds, evidence=evidence)
        _wait_for_others(comm, float("inf"))  # every verdict is written before a next check
        timer.cancel()  # can end the job
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
