"""The reference parameter server under ``mpiexec -n 3 python mpi_consistency_checks.py CHECK``.

Rank 0 serves, ranks 1 and 2 work; worker 2 is a straggler. Oracles:
synchronous SGD on the whole batch (bsp), the closed form of asynchronous SGD
(each pushed gradient applied exactly once), and the SSP staleness bound
(n - 1)(2S + 1) of ``minidl.reference.dist.parameter_server``.
"""

import sys

import numpy as np

from minidl import exercises
from minidl.exercises import Unimplemented
from minidl.exercises.checks import consistency as checks
from minidl.reference.dist import parameter_server
from minidl.reference.dist.ssp import WorkerClocks
from tests.distributed.mpi_checks import run_named_checks

SLOW = 0.02  # seconds per gradient of worker 2: long against a message's round trip


def staleness_bound(workers, staleness):
    return (workers - 1) * (2 * staleness + 1)


def check_bsp_is_synchronous_sgd(comm):
    """bsp (S = 0): the server's weights are synchronous SGD on the union of the batches."""
    workers = comm.size - 1
    weights, log, _ = checks.run_parameter_server(comm, WorkerClocks(workers, 0), delay=SLOW)
    expected = checks.synchronous_sgd(workers)
    assert np.allclose(weights, expected, rtol=1e-12, atol=0), (weights, expected)
    checks.expect_each_update_once(log, workers, "bsp")
    assert max(s for _, _, s in log) <= staleness_bound(workers, 0), log


def check_ssp_bounds_staleness(comm):
    """ssp:1: the fast worker runs ahead (staleness above bsp's), never past the bound."""
    workers, bound = comm.size - 1, 1
    weights, log, pushed = checks.run_parameter_server(
        comm, WorkerClocks(workers, bound), delay=SLOW
    )
    worst = max(s for _, _, s in log)
    assert staleness_bound(workers, 0) < worst <= staleness_bound(workers, bound), log
    checks.expect_each_update_once(log, workers, "ssp:1")
    assert np.allclose(
        weights, checks.start_weights() - checks.PS_LR / workers * pushed, rtol=1e-12, atol=1e-14
    )


def check_asp_is_unbounded_and_applies_each_gradient_once(comm):
    """asp: the straggler's gradients are staler than ssp:1 allows; w_T = w_0 - (lr/n) sum g."""
    workers = comm.size - 1
    weights, log, pushed = checks.run_parameter_server(
        comm, WorkerClocks(workers, None), delay=SLOW
    )
    assert max(s for _, _, s in log) > staleness_bound(workers, 1), log
    checks.expect_each_update_once(log, workers, "asp")
    assert np.allclose(
        weights, checks.start_weights() - checks.PS_LR / workers * pushed, rtol=1e-12, atol=1e-14
    )


def check_exercise(comm):
    """Exercise 8.2's check passes on the reference solution."""
    exercises.get("8.2").check(comm)


def check_stubbed_exercise_aborts(comm):
    """A stubbed worker region must end the job (the server would wait for it forever)."""

    def stub(*args):
        raise Unimplemented("8.2", "Parameter server: push, apply, gated pull")

    parameter_server.work = stub
    exercises.get("8.2").check(comm)


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
