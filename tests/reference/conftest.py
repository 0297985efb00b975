"""The MPI fixtures of tests/distributed (``mpi_run``, ``run_checks``) for the reference tests."""
from tests.distributed.conftest import checks_script, mpi_run, run_checks

__all__ = ["checks_script", "mpi_run", "run_checks"]
