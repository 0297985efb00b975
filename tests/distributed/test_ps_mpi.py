"""Parameter server, SSP, asp, averaging and EASGD under mpiexec: see ps_checks.py."""

import pytest

pytestmark = pytest.mark.mpi

SCRIPT = "ps_checks.py"


@pytest.mark.parametrize("nprocs", (3, 4))
def test_bsp_is_synchronous_sgd_on_one_or_more_servers(run_checks, nprocs):
    run_checks(nprocs, "bsp_is_synchronous_sgd", script=SCRIPT, timeout=120)


def test_ssp_zero_is_bsp_and_ssp_bounds_staleness_under_a_straggler(run_checks):
    run_checks(
        3, "ssp0_is_bsp_under_delays", "ssp_staleness_is_bounded", script=SCRIPT, timeout=120
    )


def test_asp_applies_every_update_exactly_once_and_replicas_end_equal(run_checks):
    run_checks(3, "asp_applies_every_update_once", script=SCRIPT, timeout=120)


def test_model_averaging_and_elastic_averaging(run_checks):
    run_checks(3, "averaging", "easgd_conserves_the_elastic_sum", script=SCRIPT, timeout=120)


def test_a_nan_on_one_worker_stops_every_rank_without_a_hang(run_checks):
    run_checks(3, "a_nan_stops_every_rank", script=SCRIPT, timeout=120)


def test_compressed_gradients_in_synchronous_data_parallelism(run_checks):
    run_checks(3, "compressed_sync", script=SCRIPT, timeout=120)
