"""The per-level fit finds the links the emulated cluster was built with."""

import pathlib

import pytest

pytestmark = pytest.mark.mpi
CHECKS = pathlib.Path(__file__).resolve().parent / "level_checks.py"
RATE_BITS = 200e6


def test_the_fitted_inter_node_bandwidth_is_the_link_rate(cluster):
    result = cluster(2, rate="200mbit").run(2, CHECKS, timeout=120)
    assert not result.timed_out and result.returncode == 0, result.output
    line = next(l for l in result.output.splitlines() if l.startswith("LEVELS"))
    intra_beta, inter_beta, inter_alpha = map(float, line.split()[1:])
    # beta is the slope between the largest messages, past what the token bucket lets through
    # at once: the link's rate (TCP gets 95-97% of it), or up to 2x slower on a loaded
    # machine; an unlimited link would come out 10-100x faster
    assert 0.9 * 8 / RATE_BITS < inter_beta < 2 * 8 / RATE_BITS, (inter_beta, 8 / RATE_BITS)
    assert intra_beta < 0.2 * inter_beta  # shared memory inside a node: far faster
    assert 0 <= inter_alpha < 5e-3
