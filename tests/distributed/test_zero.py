"""ZeRO stages 1, 2 and 3 under mpiexec (2 and 3 ranks, uneven shards; the dp axis of a
dp=2, tp=2 grid on 4): see zero_checks.py."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", (2, 3))
def test_zero_equals_one_process_for_every_rule_and_holds_a_share(run_checks, nprocs):
    run_checks(
        nprocs,
        "every_rule_equals_one_process",
        "stage3_recomputes_the_same_dropout_masks",
        "shards_hold_a_share",
        "state_round_trip_and_resume",
        "reduce_scatter_in_place",
        script="zero_checks.py",
        timeout=180,
    )


def test_zero_on_the_dp_axis_of_a_tensor_parallel_grid_equals_one_process(run_checks):
    run_checks(4, "dp_axis_of_a_tensor_parallel_grid", script="zero_checks.py", timeout=120)


def test_a_stage3_rank_without_a_sample_in_its_first_step_stops_the_job(mpi_run, checks_script):
    script = checks_script.parent / "zero_checks.py"
    result = mpi_run(2, script, "a_first_step_without_samples_stops_the_job", timeout=60)
    assert not result.timed_out, result.output
    assert result.returncode != 0 and "no sample in its first step" in result.output
