"""Spatial parallelism under mpiexec on 1 to 4 ranks equals one process: see spatial_checks.py."""

import os
import pathlib

import pytest

from minidl.dist.launch import mpi_unavailable_reason, run_mpi

pytestmark = pytest.mark.mpi

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "spatial_checks.py"


def run_checks(nprocs, *checks, timeout=150):
    """Run named checks of spatial_checks.py on ``nprocs`` ranks; assert every rank passed."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
    }
    result = run_mpi(nprocs, [SCRIPT, *checks], timeout=timeout, env=env)
    assert not result.timed_out, f"hung for {result.seconds:.0f} s:\n{result.output}"
    assert result.returncode == 0, result.output
    for check in checks:
        assert result.output.count(f"CHECK {check} OK rank") == nprocs, result.output


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4))
def test_halo_gather_and_group_sum_pass_the_adjoint_test_and_layers_equal_serial(nprocs):
    run_checks(nprocs, "adjoint", "layers")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (2, 3, 4))
def test_lenet5_split_over_rows_trains_to_the_serial_weights_with_the_predicted_halo_bytes(nprocs):
    run_checks(nprocs, "lenet")


@pytest.mark.timeout(200)
def test_data_parallel_replicas_of_a_row_split_lenet5_equal_one_process_with_both_batches():
    run_checks(4, "grid")
