"""ZeRO stages 1 and 2 under mpiexec (2 and 3 ranks, uneven shards): see zero_checks.py."""

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", (2, 3))
def test_zero_equals_one_process_for_every_rule_and_holds_a_share(run_checks, nprocs):
    run_checks(
        nprocs,
        "every_rule_equals_one_process",
        "shards_hold_a_share",
        "state_round_trip_and_resume",
        script="zero_checks.py",
        timeout=180,
    )
