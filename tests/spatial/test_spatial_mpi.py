"""Spatial parallelism under mpiexec on 1 to 4 ranks equals one process: see spatial_checks.py."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (1, 2, 3, 4))
def test_halo_gather_and_group_sum_pass_the_adjoint_test_and_layers_equal_serial(
    run_checks, nprocs
):
    run_checks(nprocs, "adjoint", "layers", timeout=150)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nprocs", (2, 4))
def test_lenet5_split_over_rows_trains_to_the_serial_weights_with_the_predicted_bytes(
    run_checks, nprocs
):
    run_checks(nprocs, "lenet", timeout=150)


@pytest.mark.timeout(200)
def test_data_parallel_replicas_of_a_row_split_lenet5_equal_one_process_with_both_batches(
    run_checks,
):
    run_checks(4, "grid", timeout=150)


@pytest.mark.timeout(200)
def test_alexnet_small_split_over_three_uneven_row_blocks_trains_to_the_serial_weights(run_checks):
    run_checks(3, "alexnet", timeout=150)
