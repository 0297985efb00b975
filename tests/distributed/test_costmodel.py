"""The alpha-beta-gamma cost model: Ben-Nun & Hoefler's formulas, the fit, and the bench helpers.

No MPI needed: the formulas are checked against their closed forms and the
fit against synthetic timings with known parameters.
"""

import math

import numpy as np
import pytest

from minidl.dist import collectives
from minidl.perf import allreduce_cost
from minidl.perf.allreduce_cost import CostParams, predict
from minidl_app.cli import bench_allreduce as bench

ALPHA, BETA = 2e-6, 1e-10


@pytest.mark.parametrize("size", (2, 4, 8, 64))
@pytest.mark.parametrize("nbytes", (8, 1 << 20, 1 << 28))
def test_tree_costs_twice_the_butterfly_without_reduction(size, nbytes):
    params = CostParams(ALPHA, BETA, 0.0)
    t_bfly = math.log2(size) * (ALPHA + nbytes * BETA)  # Ben-Nun & Hoefler, T_bfly
    assert predict("butterfly", nbytes, size, params) == pytest.approx(t_bfly)
    assert predict("tree", nbytes, size, params) == pytest.approx(2 * t_bfly)


@pytest.mark.parametrize("size", (2, 3, 4, 5, 8, 12))
def test_ring_bandwidth_term_is_2_p_minus_1_over_p(size):
    nbytes = 1 << 26
    bandwidth_only = CostParams(0.0, BETA, 0.0)
    expected = 2 * (size - 1) / size * nbytes * BETA
    assert predict("ring", nbytes, size, bandwidth_only) == pytest.approx(expected)
    latency_only = CostParams(ALPHA, 0.0, 0.0)
    assert predict("ring", nbytes, size, latency_only) == pytest.approx(2 * (size - 1) * ALPHA)


@pytest.mark.parametrize("size", (2, 4, 16))
def test_rabenseifner_meets_the_bandwidth_lower_bound_with_log_latency(size):
    nbytes = 1 << 24
    params = CostParams(ALPHA, BETA, 0.0)
    expected = 2 * ALPHA * math.log2(size) + 2 * nbytes * BETA * (size - 1) / size  # T_rabe
    assert predict("rabenseifner", nbytes, size, params) == pytest.approx(expected)


def test_non_powers_of_two_pay_ceil_log_rounds_or_a_fold():
    params = CostParams(ALPHA, BETA, 0.0)
    m, step = 1 << 20, ALPHA + (1 << 20) * BETA
    assert predict("tree", m, 5, params) == pytest.approx(2 * 3 * step)  # ceil(log2 5) = 3
    assert predict("butterfly", m, 5, params) == pytest.approx(
        2 * step + 2 * step
    )  # 4 ranks + fold
    assert predict("rabenseifner", m, 6, params) == pytest.approx(
        predict("rabenseifner", m, 4, params) + 2 * step
    )


def test_reduction_term_counts_the_bytes_added_on_the_critical_path():
    gamma_only = CostParams(0.0, 0.0, 1e-10)
    m, size = 1 << 20, 8
    assert predict("tree", m, size, gamma_only) == pytest.approx(3 * m * 1e-10)
    assert predict("butterfly", m, size, gamma_only) == pytest.approx(3 * m * 1e-10)
    assert predict("ring", m, size, gamma_only) == pytest.approx(7 / 8 * m * 1e-10)
    assert predict("rabenseifner", m, size, gamma_only) == pytest.approx(7 / 8 * m * 1e-10)


def test_choice_follows_message_size():
    """Latency-bound small messages favour the butterfly; large ones a bandwidth-optimal one."""
    params = CostParams(ALPHA, BETA, 5e-11)
    assert allreduce_cost.choose(64, 16, params) == "butterfly"
    assert allreduce_cost.choose(1 << 28, 16, params) in ("ring", "rabenseifner")
    assert allreduce_cost.choose(1 << 28, 64, params) == "rabenseifner"  # ring's 2(P-1) alphas
    times = {
        name: predict(name, 1 << 28, 16, params) for name in allreduce_cost.MODELLED_ALGORITHMS
    }
    assert times["tree"] > times["butterfly"] > times["ring"]


def test_one_rank_or_empty_message_costs_nothing():
    params = CostParams(ALPHA, BETA, 1e-10)
    for name in allreduce_cost.MODELLED_ALGORITHMS:
        assert predict(name, 1 << 20, 1, params) == 0.0
        assert predict(name, 0, 4, params) == 0.0


def test_library_allreduce_has_no_formula():
    with pytest.raises(ValueError, match="choose_by_measurement"):
        predict("mpi", 1024, 2, CostParams(ALPHA, BETA, 0.0))


def test_auto_picks_among_implemented_algorithms_in_a_known_mode():
    assert set(allreduce_cost.AUTO_ALGORITHMS) <= set(collectives.ALLREDUCE_ALGORITHMS)
    choice = collectives.AutoChoice("rule", collectives.SEGMENT_BYTES)
    with pytest.raises(ValueError, match="rule, model, measure"):
        choice.mode = "fastest"
    assert choice.mode == "rule"


def test_fit_recovers_alpha_and_beta_from_synthetic_pingpong():
    sizes = np.array(allreduce_cost.PINGPONG_SIZES, dtype=float)
    exact = ALPHA + BETA * sizes
    alpha, beta = allreduce_cost.fit_alpha_beta(sizes, exact)
    assert alpha == pytest.approx(ALPHA, rel=1e-9) and beta == pytest.approx(BETA, rel=1e-9)
    noise = np.random.default_rng(0).uniform(0.97, 1.03, sizes.size)
    alpha, beta = allreduce_cost.fit_alpha_beta(sizes, exact * noise)
    assert alpha == pytest.approx(ALPHA, rel=0.1) and beta == pytest.approx(BETA, rel=0.1)


def test_fit_never_returns_a_negative_latency():
    sizes = np.array([1e3, 1e5, 1e7])
    alpha, beta = allreduce_cost.fit_alpha_beta(sizes, 1e-10 * sizes - 1e-8)
    assert alpha == 0.0 and beta == pytest.approx(1e-10, rel=0.1)


@pytest.mark.parametrize(
    "text,nbytes",
    [
        ("4096", 4096),
        ("1K", 1024),
        ("64KiB", 65536),
        ("16M", 1 << 24),
        ("1G", 1 << 30),
        ("0.5M", 1 << 19),
    ],
)
def test_bench_sizes_parse(text, nbytes):
    assert bench.parse_size(text) == nbytes


def test_bench_rejects_a_bad_size():
    with pytest.raises(ValueError, match="64K"):
        bench.parse_size("lots")
