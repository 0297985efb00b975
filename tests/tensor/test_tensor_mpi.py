"""Tensor parallelism under mpiexec on 1 to 4 ranks: see tensor_checks.py for the oracles."""

import os
import pathlib

import pytest

from minidl.dist.launch import mpi_unavailable_reason, run_mpi

pytestmark = pytest.mark.mpi

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run_checks(nprocs, *checks, script="tensor_checks.py", timeout=120):
    """Run named checks of ``script`` on ``nprocs`` ranks; assert every rank passed."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
    }
    result = run_mpi(nprocs, [HERE / script, *checks], timeout=timeout, env=env)
    assert not result.timed_out, f"hung for {result.seconds:.0f} s:\n{result.output}"
    assert result.returncode == 0, result.output
    for check in checks:
        assert result.output.count(f"CHECK {check} OK rank") == nprocs, result.output
    return result


@pytest.mark.timeout(150)
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4))
def test_each_collective_backward_is_the_adjoint_of_its_forward(nprocs):
    run_checks(nprocs, "adjoints", "traffic_counts_the_payload")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("nprocs", (2, 3))
def test_send_backward_receives_what_recv_backward_sends(nprocs):
    run_checks(nprocs, "send_recv")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4))
def test_tensor_parallel_layers_equal_the_serial_layers_uneven_splits_included(nprocs):
    run_checks(nprocs, "layers", "pairs", "class_parallel_cross_entropy")
