"""Tensor parallelism under mpiexec on 1 to 4 ranks: see tensor_checks.py for the oracles."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(150)
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4))
def test_each_collective_backward_is_the_adjoint_of_its_forward(run_checks, nprocs):
    run_checks(nprocs, "adjoints", "traffic_counts_the_payload", timeout=120)


@pytest.mark.timeout(150)
def test_a_grid_wider_than_a_layer_is_refused_naming_it_and_what_fits(run_checks):
    run_checks(3, "grid_refusals", timeout=120)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("nprocs", (2, 3))
def test_send_backward_receives_what_recv_backward_sends(run_checks, nprocs):
    run_checks(nprocs, "send_recv", timeout=120)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4))
def test_tensor_parallel_layers_equal_the_serial_layers_uneven_splits_included(run_checks, nprocs):
    run_checks(
        nprocs, "layers", "pairs", "group_layers", "class_parallel_cross_entropy", timeout=120
    )


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (2, 3, 4))
def test_mlp_and_lenet5_trained_20_steps_on_every_dp_x_tp_grid_equal_one_process(
    run_checks, nprocs
):
    run_checks(nprocs, "mlp_training", "lenet_training", timeout=180)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (2, 4))
def test_a_two_column_network_with_one_group_per_rank_trains_the_serial_weights(run_checks, nprocs):
    run_checks(nprocs, "two_column_training", timeout=180)
