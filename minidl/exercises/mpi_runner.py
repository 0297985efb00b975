"""Run MPI exercise checks on every rank and report per rank (started by the grader under mpiexec).

    mpiexec -n 3 python -m minidl.exercises.mpi_runner MODULE:ID [MODULE:ID ...]

Each argument names a check's module (imported to register it) and its
exercise id. Every rank runs ``check(comm)`` for each id in order and prints
one line per check, ``MINIDL-EXERCISE {"id", "rank", "status", "message",
"seconds"}``, then waits for the other ranks before the next check, so the
messages of two checks never mix. A watchdog per check: a rank still inside
the check (or still waiting for the others) when the exercise's timeout
passes reports ``timed_out`` and exits, which ends the job.
"""
import importlib
import json
import os
import sys
import threading
import time

from . import get
from .grader import REPORT, invoke, outcome

POLL_S = 0.002   # how often a rank that has finished a check looks whether the others have


def report(exercise_id, rank, status, message, seconds):
    print(REPORT + json.dumps({"id": exercise_id, "rank": rank, "status": status,
                               "message": message, "seconds": seconds}), flush=True)


def _watchdog(exercise, rank, start):
    """Report a hang of ``exercise`` on this rank and end the job after its timeout."""
    def fire():
        report(exercise.id, rank, "timed_out",
               f"still in the check or waiting for the other ranks after {exercise.timeout:g} s",
               time.perf_counter() - start)
        sys.stderr.flush()
        os._exit(124)
    timer = threading.Timer(exercise.timeout, fire)
    timer.daemon = True
    timer.start()
    return timer


def _wait_for_others(comm):
    """A barrier that sleeps between polls (a blocking one would spin on the cores the others need)."""
    request = comm.mpi.Ibarrier()
    while not request.Test():
        time.sleep(POLL_S)


def main(argv):
    import minidl as md
    targets = []
    for arg in argv:
        module, _, exercise_id = arg.rpartition(":")
        importlib.import_module(module)
        targets.append(get(exercise_id))
    comm = md.dist.init()
    for exercise in targets:
        start = time.perf_counter()
        timer = _watchdog(exercise, comm.rank, start)
        try:
            invoke(exercise, comm)
            exc = None
        except Exception as error:  # noqa: BLE001 -- every failure becomes this rank's verdict
            exc = error
        status, message = outcome(exercise, exc)
        report(exercise.id, comm.rank, status, message, time.perf_counter() - start)
        _wait_for_others(comm)
        timer.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
