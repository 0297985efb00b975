"""spatial x tp grids under mpiexec equal one process (tensor_checks.check_spatial_tp_training)."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(200)
def test_lenet5_on_spatial2_tp2_trains_20_steps_to_the_serial_weights(run_checks):
    run_checks(4, "spatial_tp_training", timeout=150)
