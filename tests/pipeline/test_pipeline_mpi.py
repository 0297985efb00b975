"""Pipeline training under mpiexec on 2 and 4 ranks equals one process: see pipeline_checks.py."""

import os
import pathlib

import pytest

from minidl_app.launch import mpi_unavailable_reason, run_mpi

pytestmark = pytest.mark.mpi

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPT = HERE / "pipeline_checks.py"


def run_checks(nprocs, *checks, timeout=180):
    """Run named checks of pipeline_checks.py on ``nprocs`` ranks; assert every rank passed."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
    }
    result = run_mpi(nprocs, [SCRIPT, *checks], timeout=timeout, env=env)
    assert not result.timed_out, f"hung for {result.seconds:.0f} s:\n{result.output}"
    assert result.returncode == 0, result.output
    for check in checks:
        assert result.output.count(f"CHECK {check} OK rank") == nprocs, result.output


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nprocs", (2, 4))
def test_every_schedule_gives_the_serial_weights_on_an_mlp(nprocs):
    run_checks(nprocs, "mlp", "stage_choices")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nprocs", (2, 4))
def test_gpipe_and_1f1b_give_the_serial_weights_on_a_conv_net(nprocs):
    run_checks(nprocs, "convnet")


@pytest.mark.timeout(240)
def test_batchnorm_is_per_micro_batch_as_in_one_process_applying_it_per_micro_batch():
    run_checks(2, "batchnorm")


@pytest.mark.timeout(240)
def test_dp_x_pp_allreduces_once_per_step_and_gives_the_serial_weights():
    run_checks(4, "dp_pp")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nprocs", (2, 4))
def test_pipedream_applies_the_stashing_reference_updates_with_the_expected_staleness(nprocs):
    run_checks(nprocs, "pipedream")


@pytest.mark.timeout(240)
def test_the_weight_stashing_exercise_passes_on_the_reference_and_fails_without_staleness():
    run_checks(2, "exercise_weight_stashing")


@pytest.mark.timeout(240)
def test_a_non_finite_gradient_stops_every_rank_of_dp_x_pp_without_a_hang():
    run_checks(4, "non_finite")


@pytest.mark.timeout(240)
def test_bad_arguments_are_refused_alike_on_every_rank():
    run_checks(2, "refusals")


@pytest.mark.timeout(240)
def test_the_gathered_optimizer_state_is_one_process_and_resumes_on_another_schedule():
    run_checks(4, "optimizer_state")
