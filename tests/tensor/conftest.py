"""The MPI fixtures of tests/distributed (``mpi_run``, ``run_checks``), running tensor_checks."""

import pathlib

import pytest

from tests.distributed.conftest import mpi_run, run_checks

__all__ = ["checks_script", "mpi_run", "run_checks"]


@pytest.fixture
def checks_script():
    """What ``run_checks`` launches: this folder's runner."""
    return pathlib.Path(__file__).with_name("tensor_checks.py")
