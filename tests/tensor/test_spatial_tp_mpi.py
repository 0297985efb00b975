"""spatial x tp grids under mpiexec equal one process (tensor_checks.check_spatial_tp_training)."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (4, 8))
def test_lenet5_on_dp_x_spatial2_x_tp2_trains_20_steps_to_the_serial_weights(run_checks, nprocs):
    """4 ranks: spatial=2,tp=2; 8 ranks: dp=2,spatial=2,tp=2 (replicas on halves of each batch)."""
    run_checks(nprocs, "spatial_tp_training", timeout=150)
