"""Synchronous data parallelism under mpiexec (2 and 3 ranks): see dp_checks.py."""

import pytest

pytestmark = pytest.mark.mpi

SCRIPT = "dp_checks.py"


@pytest.mark.parametrize("nprocs", (2, 3))
def test_rank_idiom_and_equivalence_with_one_process(run_checks, nprocs):
    run_checks(nprocs, "rank_idiom", "equivalence", script=SCRIPT, timeout=120)


@pytest.mark.parametrize("nprocs", (2, 3))
def test_uneven_batches_gradient_accumulation_and_the_optimizer_interface(run_checks, nprocs):
    run_checks(
        nprocs,
        "uneven_last_batch",
        "gradient_accumulation",
        "optimizer_interface",
        script=SCRIPT,
        timeout=120,
    )


def test_a_rank_with_another_model_is_named(mpi_run):
    from pathlib import Path

    result = mpi_run(3, Path(__file__).parent / SCRIPT, "different_model")
    assert not result.timed_out
    assert result.returncode != 0
    assert "rank 1 built a different model" in result.output
    assert "1.weight is (32, 784) float32 there but (16, 784) float32 on rank 0" in result.output
