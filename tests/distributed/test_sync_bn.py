"""Synchronised batch norm under mpiexec (2 and 3 ranks, uneven shares): see sync_bn_checks.py."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", (2, 3))
def test_sync_batch_norm_equals_one_process_with_the_whole_batch(run_checks, nprocs):
    run_checks(
        nprocs,
        "layer_equals_one_process",
        "a_batch_of_one_value_per_channel_is_refused",
        "convert_keeps_names_and_values",
        "training_equals_one_process",
        "float32_statistics_keep_their_digits",
        script="sync_bn_checks.py",
        timeout=120,
    )


def test_sync_batch_norm_in_the_tail_of_a_spatial_grid_equals_one_process(run_checks):
    run_checks(4, "tail_of_a_spatial_grid_equals_one_process", script="sync_bn_checks.py")
