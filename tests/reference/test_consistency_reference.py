"""The reference SSP gate, parameter server, EASGD and model averaging against their oracles."""

import itertools
import pathlib

import numpy as np
import pytest

from minidl.dist.consistency.averaging import ElasticRule
from minidl.dist.consistency.ssp import ClockTable
from minidl.reference.dist import averaging
from minidl.reference.dist.ssp import WorkerClocks

SCRIPT = pathlib.Path(__file__).with_name("mpi_consistency_checks.py")


# ---- the SSP gate ---------------------------------------------------------------------------
@pytest.mark.parametrize("staleness", (0, 1, 2, None))
def test_gate_matches_the_tuned_clock_table_on_every_small_table(staleness):
    for clocks in itertools.product(range(4), repeat=3):
        mine, tuned = WorkerClocks(3, staleness), ClockTable(3, staleness)
        for worker, ticks in enumerate(clocks):
            for _ in range(ticks):
                assert mine.tick(worker) == tuned.tick(worker)
        for clock in range(7):
            assert mine.may_start(clock) == tuned.may_start(clock), (clocks, clock)


def test_bsp_waits_for_everyone_and_asp_for_no_one():
    bsp, asp = WorkerClocks(2, 0), WorkerClocks(2, None)
    for clocks in (bsp, asp):
        clocks.tick(0)
    assert not bsp.may_start(1)  # worker 1 has not finished clock 0
    assert asp.may_start(1) and asp.may_start(10**6)
    bsp.tick(1)
    assert bsp.may_start(1)


@pytest.mark.parametrize("bad", (-1, 1.5, "2"))
def test_a_bad_staleness_bound_names_the_fix(bad):
    with pytest.raises(ValueError, match="integer >= 0, or None"):
        WorkerClocks(2, bad)


# ---- EASGD ----------------------------------------------------------------------------------
def replicas(rng, n, dim=5):
    return [rng.standard_normal(dim) for _ in range(n)]


def test_synchronous_easgd_is_the_slides_form_with_beta_n_alpha():
    """Ben-Nun & Hoefler's slides: x~ <- (1 - beta) x~ + (beta / n) sum_i x_i, beta = n alpha."""
    rng = np.random.default_rng(0)
    n, lr, rho = 4, 0.05, 2.0
    workers, center, grads = replicas(rng, n), rng.standard_normal(5), replicas(rng, n)
    new_workers, new_center = averaging.easgd_step(workers, center, grads, lr, rho)
    alpha = lr * rho
    beta = n * alpha
    np.testing.assert_allclose(
        new_center, (1 - beta) * center + beta / n * sum(workers), rtol=1e-12
    )
    for x, g, new in zip(workers, grads, new_workers):
        np.testing.assert_allclose(new, x - lr * g - alpha * (x - center), rtol=1e-12)


def test_synchronous_easgd_conserves_the_elastic_sum_and_contracts_the_spread():
    rng = np.random.default_rng(1)
    n, lr, rho = 3, 0.1, 1.0
    workers, center = replicas(rng, n), rng.standard_normal(5)
    zero = [np.zeros(5)] * n
    total = sum(workers) + center
    spread = max(np.linalg.norm(x - center) for x in workers)
    for _ in range(20):
        workers, center = averaging.easgd_step(workers, center, zero, lr, rho)
        np.testing.assert_allclose(sum(workers) + center, total, rtol=1e-12)
    assert max(np.linalg.norm(x - center) for x in workers) < 0.5 * spread


def test_asynchronous_exchange_matches_the_tuned_elastic_rule():
    rng = np.random.default_rng(2)
    center = rng.standard_normal(64).astype(np.float32)
    local = rng.standard_normal(64).astype(np.float32)
    alpha = 0.3
    rule = ElasticRule(center.copy(), alpha)
    difference, _ = rule.push(0, 0, 0, local.view(np.uint8))
    new_local, new_center = averaging.elastic_exchange(local, center, np.float32(alpha))
    np.testing.assert_array_equal(new_center, rule.center)
    np.testing.assert_array_equal(new_local, local - difference)
    np.testing.assert_allclose(new_local + new_center, local + center, rtol=1e-6)


# ---- model averaging ------------------------------------------------------------------------
def linear_gradient(matrices, targets):
    """Replica i minimises 1/2 (w - b_i)^T A_i (w - b_i): its gradient is A_i (w - b_i)."""
    return lambda i, w, t: matrices[i] @ (w - targets[i])


def test_averaging_every_step_is_synchronous_sgd():
    rng = np.random.default_rng(3)
    n, dim, lr, steps = 3, 4, 0.1, 6
    matrices = [np.eye(dim) + 0.1 * rng.standard_normal((dim, dim)) for _ in range(n)]
    targets = replicas(rng, n, dim)
    gradient = linear_gradient(matrices, targets)
    w = rng.standard_normal(dim)
    got = averaging.local_sgd([w] * n, gradient, lr, period=1, steps=steps)
    for t in range(steps):
        w = w - lr * np.mean([gradient(i, w, t) for i in range(n)], axis=0)
    for replica in got:
        np.testing.assert_allclose(replica, w, rtol=1e-12)


def test_one_average_at_the_end_averages_independent_sgd_runs():
    rng = np.random.default_rng(4)
    n, dim, lr, steps = 3, 4, 0.1, 5
    matrices = [np.diag(rng.uniform(0.5, 2.0, dim)) for _ in range(n)]
    targets = replicas(rng, n, dim)
    start = replicas(rng, n, dim)
    alone = [
        averaging.local_sgd(
            [w],
            lambda _, x, t, i=i: matrices[i] @ (x - targets[i]),
            lr,
            period=steps + 1,
            steps=steps,
        )[0]
        for i, w in enumerate(start)
    ]
    got = averaging.local_sgd(
        start, linear_gradient(matrices, targets), lr, period=steps, steps=steps
    )
    for replica in got:
        np.testing.assert_allclose(replica, np.mean(alone, axis=0), rtol=1e-12)


def test_replicas_agree_right_after_an_average_and_drift_between():
    rng = np.random.default_rng(5)
    n, dim = 3, 4
    gradient = linear_gradient([np.eye(dim)] * n, replicas(rng, n, dim))
    start = replicas(rng, n, dim)
    after_average = averaging.local_sgd(start, gradient, 0.1, period=2, steps=4)
    between = averaging.local_sgd(start, gradient, 0.1, period=2, steps=5)
    assert all(np.array_equal(r, after_average[0]) for r in after_average)
    assert not np.allclose(between[0], between[1])
    with pytest.raises(ValueError, match="period H must be >= 1"):
        averaging.local_sgd(start, gradient, 0.1, period=0, steps=1)


# ---- the parameter server, under mpiexec -----------------------------------------------------
@pytest.mark.mpi
def test_parameter_server_bsp_ssp_asp_and_the_exercise_check(run_checks):
    run_checks(
        3,
        "bsp_is_synchronous_sgd",
        "ssp_bounds_staleness",
        "asp_is_unbounded_and_applies_each_gradient_once",
        "exercise",
        script=SCRIPT,
        timeout=60,
    )


@pytest.mark.mpi
def test_a_stubbed_exercise_region_ends_the_job_instead_of_hanging(mpi_run):
    result = mpi_run(3, SCRIPT, "stubbed_exercise_aborts", timeout=30)
    assert not result.timed_out, f"the job hung:\n{result.output}"
    assert result.returncode != 0
    assert "exercise 8.2" in result.output and "aborting every rank" in result.output, result.output
