"""Fake exercises with known verdicts, registered on import (ids 90.x in process, 91.x on
MPI ranks).

The grader tests import this module with the registry saved and restore it
afterwards; the MPI runner imports it by name in each rank.
"""

import sys
import traceback

import numpy as np

from minidl.exercises import exercise, expect_close, expect_equal

from . import fake_student

PATH = "tests/exercises/fake_student.py"


@exercise("90.1", "passes", PATH, hint="nothing to do")
def passes():
    expect_close("three ones", np.ones(3), np.ones(3))


@exercise("90.2", "fails", PATH, hint="look at the last element")
def fails():
    expect_close("partial sums", np.array([1.0, 3.0, 7.0]), np.array([1.0, 3.0, 6.0]))


@exercise("90.3", "not written", PATH, hint="write the region")
def not_written():
    fake_student.stub("90.3")


@exercise("90.4", "raises", PATH, hint="mind the divisor")
def raises():
    fake_student.divide(1.0, 0)


@exercise("90.5", "bare assert", PATH, hint="read the assert")
def bare_assert():
    fake_student.assert_positive(-1)


@exercise("90.6", "never ends", PATH, hint="the loop needs an exit", timeout=0.5)
def never_ends():
    fake_student.spin()


@exercise("90.7", "uses another exercise", PATH, hint="-")
def uses_another():
    fake_student.stub("90.3")


@exercise("90.8", "prints", PATH, hint="-")
def prints():
    expect_close("what chatty returns", fake_student.chatty(), 1.0)


@exercise("91.1", "mean of the ranks", PATH, hint="-", ranks=2)
def mpi_passes(comm):
    x = np.full(3, float(comm.rank))
    comm.allreduce(x, op="mean")
    expect_close("mean of the ranks", x, np.full(3, (comm.size - 1) / 2))


@exercise("91.2", "fails on rank 1", PATH, hint="every rank must agree", ranks=2)
def mpi_fails(comm):
    expect_equal("the rank", comm.rank, 0)


@exercise("91.3", "waits for nobody", PATH, hint="send what rank 0 receives", ranks=2, timeout=3)
def mpi_hangs(comm):
    if comm.rank == 0:
        comm.mpi.Recv(np.empty(1), source=1, tag=77)


@exercise("91.4", "runs after a hang", PATH, hint="-", ranks=2)
def mpi_after_hang(comm):
    expect_equal("the size", comm.size, 2)


@exercise("91.5", "aborts the job when a rank fails", PATH, hint="read the traceback", ranks=2)
def mpi_aborts(comm):
    try:
        if comm.rank == 1:
            fake_student.divide(1.0, 0)
        comm.barrier()
    except Exception:  # noqa: BLE001 -- as a real check may: print, then end every rank
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        comm.mpi.Abort(1)


@exercise("91.6", "raises while the other rank waits", PATH, hint="-", ranks=2, timeout=3)
def mpi_raises_while_the_other_waits(comm):
    if comm.rank == 0:
        fake_student.divide(1.0, 0)
    comm.mpi.Recv(np.empty(1), source=0, tag=78)
