"""An exception on one rank must end the whole job, with its traceback printed once."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", (2, 3))
def test_exception_on_one_rank_aborts_every_rank(mpi_run, checks_script, nprocs):
    result = mpi_run(nprocs, checks_script, "raise_on_one_rank", timeout=30)
    assert not result.timed_out, f"the other ranks were left hanging:\n{result.output}"
    assert result.returncode != 0
    assert result.output.count("uncaught exception on rank 1 of") == 1, result.output
    assert result.output.count("Traceback (most recent call last)") == 1, result.output
    assert result.output.count("RuntimeError: deliberate failure on rank 1") == 1, result.output
