"""spatial x tp and pp x tp grids under mpiexec equal one process: see tensor_checks.py."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (4, 8))
def test_lenet5_on_dp_x_spatial2_x_tp2_trains_20_steps_to_the_serial_weights(run_checks, nprocs):
    """4 ranks: spatial=2,tp=2; 8 ranks: dp=2,spatial=2,tp=2 (replicas on halves of each batch)."""
    run_checks(nprocs, "spatial_tp_training", timeout=150)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (4, 8))
def test_pipeline_stages_of_tensor_parallel_layers_train_20_steps_to_the_serial_weights(
    run_checks, nprocs
):
    """4 ranks: pp=2,tp=2; 8: dp=2,pp=2,tp=2. LeNet-5 and an MLP, 2 micro-batches."""
    run_checks(nprocs, "pipeline_tp_training", timeout=150)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (2, 4))
def test_a_tp_or_pp_rank_holds_only_its_blocks_or_its_stage(run_checks, nprocs):
    """2 ranks: tp=2 and pp=2; 4: dp=2 x each. Counted over every live parameter array."""
    run_checks(nprocs, "shares_only", timeout=150)
