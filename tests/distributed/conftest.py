"""Helpers for the MPI tests: launch ``mpi_checks.py`` under mpiexec with a timeout."""

import os
import pathlib

import pytest

from minidl_app.launch import mpi_unavailable_reason, run_mpi

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LAUNCH_TIMEOUT = 60


def _env(extra=None):
    path = os.environ.get("PYTHONPATH")
    return {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
        **(extra or {}),
    }


@pytest.fixture
def mpi_run():
    """``mpi_run(nprocs, *args, timeout=...)`` -> MpiRun; skips when MPI is missing."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)

    def launch(nprocs, *args, timeout=LAUNCH_TIMEOUT, env=None):
        return run_mpi(nprocs, args, timeout=timeout, env=_env(env))

    return launch


@pytest.fixture
def job_env():
    """The environment for a job a test starts by hand: this checkout on the path, 1 BLAS thread."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    return {**os.environ, **_env()}


@pytest.fixture
def checks_script():
    """The path of mpi_checks.py (what the launched ranks run)."""
    return HERE / "mpi_checks.py"


@pytest.fixture
def run_checks(mpi_run, checks_script):
    """Run named checks of mpi_checks.py (or ``script``) on ``nprocs`` ranks; assert all passed."""

    def launch(nprocs, *checks, env=None, script=None, timeout=LAUNCH_TIMEOUT):
        result = mpi_run(
            nprocs, HERE / script if script else checks_script, *checks, env=env, timeout=timeout
        )
        assert not result.timed_out, f"hung for {result.seconds:.0f} s:\n{result.output}"
        assert result.returncode == 0, result.output
        for check in checks:
            passed = result.output.count(f"CHECK {check} OK rank")
            assert passed == nprocs, result.output
        return result

    return launch
