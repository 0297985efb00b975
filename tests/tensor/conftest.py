"""The launcher of the tensor-parallel MPI tests: this checkout on the path, 1 BLAS thread."""

import os
import pathlib

import pytest

from minidl.dist.launch import mpi_unavailable_reason, run_mpi

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture
def launch():
    """``launch(nprocs, *args, timeout=...)`` -> the finished job; skips when MPI is missing."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
    }

    def run(nprocs, *args, timeout=120):
        result = run_mpi(nprocs, list(args), timeout=timeout, env=env)
        assert not result.timed_out, f"hung for {result.seconds:.0f} s:\n{result.output}"
        return result

    return run


@pytest.fixture
def run_checks(launch):
    """Run named checks of tensor_checks.py on ``nprocs`` ranks; assert every rank passed."""

    def run(nprocs, *checks, timeout=120):
        result = launch(nprocs, HERE / "tensor_checks.py", *checks, timeout=timeout)
        assert result.returncode == 0, result.output
        for check in checks:
            assert result.output.count(f"CHECK {check} OK rank") == nprocs, result.output

    return run
