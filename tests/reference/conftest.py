"""The MPI fixtures of tests/distributed (``mpi_run``, ``run_checks``) for the reference tests,
launching this folder's runner."""

import pathlib

import pytest

from tests.distributed.conftest import mpi_run, run_checks

__all__ = ["checks_script", "mpi_run", "run_checks"]


@pytest.fixture
def checks_script():
    """What ``run_checks`` launches unless told another ``script``: this folder's runner."""
    return pathlib.Path(__file__).with_name("mpi_reference_checks.py")
