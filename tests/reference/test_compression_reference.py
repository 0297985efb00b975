"""The reference gradient compressors against the tuned ones, their invariants and their statistics.

The tuned compressors cut vectors into buckets; with one bucket of the whole
vector and the same seeded generator they draw the same uniforms, so the
reference must give the same values bit for bit.

Statistics: the mean of N independent draws of an unbiased quantiser has,
per element, a standard deviation of at most w / (2 sqrt(N)), where w is
the distance between the two values the element can take (a two-point
variable of range w has variance <= w^2 / 4). Tolerances are 5 of those
standard errors; each test also shows that a biased rounding misses them.
"""

import numpy as np
import pytest

from minidl.dist.compression import QSGD, Float16, GradientEncoder, TernGrad, TopK
from minidl.exercises.checks.compression import gradient_like
from minidl.reference.dist import compression as ref

LENGTHS = (1, 7, 512, 4099)
DRAWS = 4000
SIGMAS = 5


def vector(n, seed=0):
    return gradient_like(np.random.default_rng(seed), n)


def qsgd(v, s, rng):
    return ref.qsgd_decode(*ref.qsgd_encode(v, s, rng), s)


def terngrad(v, rng):
    return ref.terngrad_decode(*ref.terngrad_encode(v, rng))


def topk(v, k):
    return ref.topk_decode(*ref.topk_encode(v, k), v.size)


def scaled_sign(v):
    return ref.scaled_sign_decode(*ref.scaled_sign_encode(v))


def mean_of_draws(quantise):
    return np.mean([quantise() for _ in range(DRAWS)], axis=0, dtype=np.float64)


# ---- fp16 -----------------------------------------------------------------------------------
def test_fp16_round_trip_equals_the_tuned_one():
    for n in LENGTHS:
        v = vector(n)
        assert ref.fp16_encode(v).dtype == np.float16
        np.testing.assert_array_equal(
            ref.fp16_decode(ref.fp16_encode(v)), Float16().decode(Float16().encode(v), n)
        )


# ---- QSGD -----------------------------------------------------------------------------------
@pytest.mark.parametrize("s", (1, 4, 127, 300))
def test_qsgd_equals_the_tuned_qsgd_with_one_bucket_and_the_same_seed(s):
    for n in LENGTHS:
        v = vector(n, seed=n)
        tuned = QSGD(s, bucket=n)
        expected = tuned.decode(tuned.encode(v, np.random.default_rng([s, n])), n)
        np.testing.assert_array_equal(qsgd(v, s, np.random.default_rng([s, n])), expected)


def test_qsgd_rounds_each_value_to_a_neighbouring_level():
    v, s = vector(1000), 5
    norm, levels = ref.qsgd_encode(v, s, np.random.default_rng(1))
    assert levels.dtype == np.int32 and np.abs(levels).max() <= s
    scaled = np.abs(v) / norm * s
    assert np.all((np.abs(levels) == np.floor(scaled)) | (np.abs(levels) == np.ceil(scaled)))
    assert np.all(levels * v >= 0) and np.all(levels[v == 0] == 0)
    assert np.all(qsgd(np.zeros(9, np.float32), s, np.random.default_rng(1)) == 0)


def test_qsgd_is_unbiased_and_within_its_variance_bound():
    """Alistarh et al. 2017, Lemma 3.1: E[Q(v)] = v and

    E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2.
    """
    v, s = vector(40).astype(np.float64), 3
    norm = np.linalg.norm(v)
    rng = np.random.default_rng(2)
    draws = [qsgd(v, s, rng) for _ in range(DRAWS)]
    tolerance = SIGMAS * (norm / s) / (2 * np.sqrt(DRAWS))
    np.testing.assert_allclose(np.mean(draws, axis=0), v, rtol=0, atol=tolerance)
    nearest = np.sign(v) * np.round(np.abs(v) / norm * s) * norm / s  # biased rounding
    assert np.abs(nearest - v).max() > tolerance
    variance = np.mean([np.sum((q - v) ** 2) for q in draws])
    assert variance <= min(v.size / s**2, np.sqrt(v.size) / s) * norm**2


# ---- TernGrad -------------------------------------------------------------------------------
def test_terngrad_equals_the_tuned_terngrad_with_one_bucket_and_the_same_seed():
    for n in LENGTHS:
        v = vector(n, seed=n)
        tuned = TernGrad(bucket=n)
        expected = tuned.decode(tuned.encode(v, np.random.default_rng(n)), n)
        np.testing.assert_array_equal(terngrad(v, np.random.default_rng(n)), expected)


def test_terngrad_sends_minus_s_zero_or_s_without_bias():
    v = vector(30).astype(np.float64)
    scale = np.abs(v).max()
    rng = np.random.default_rng(3)
    once = terngrad(v, rng)
    assert set(np.unique(once)) <= {-scale, 0.0, scale} and np.all(once * v >= 0)
    tolerance = SIGMAS * scale / (2 * np.sqrt(DRAWS))
    np.testing.assert_allclose(mean_of_draws(lambda: terngrad(v, rng)), v, rtol=0, atol=tolerance)
    always = np.sign(v) * scale  # keeping every sign: biased
    assert np.abs(always - v).max() > tolerance


def test_random_schemes_follow_their_generator():
    v = vector(256)
    for quantise in (lambda rng: qsgd(v, 4, rng), lambda rng: terngrad(v, rng)):
        first = quantise(np.random.default_rng(7))
        np.testing.assert_array_equal(first, quantise(np.random.default_rng(7)))
        assert not np.array_equal(first, quantise(np.random.default_rng(8)))


# ---- top-k and error feedback ---------------------------------------------------------------
@pytest.mark.parametrize("ratio", (0.01, 0.1, 1.0))
def test_topk_keeps_exactly_the_k_largest_magnitudes(ratio):
    for n in LENGTHS:
        v = vector(n, seed=n)
        k = TopK(ratio).count(n)
        index, values = ref.topk_encode(v, k)
        assert len(set(index.tolist())) == k and np.array_equal(values, v[index])
        kept = np.zeros(n, bool)
        kept[index] = True
        if k < n:
            assert np.abs(v[kept]).min() >= np.abs(v[~kept]).max()
        np.testing.assert_array_equal(topk(v, k), TopK(ratio).decode(TopK(ratio).encode(v), n))


def test_topk_error_feedback_equals_the_tuned_encoder_and_loses_nothing():
    n, ratio = 1000, 0.02
    k = TopK(ratio).count(n)
    tuned = GradientEncoder(TopK(ratio), n, error_feedback=True)
    residual = np.zeros(n, np.float32)
    for step in range(20):
        g = vector(n, seed=100 + step)
        sent, new_residual = ref.error_feedback(lambda v: topk(v, k), g, residual)
        np.testing.assert_array_equal(sent + new_residual, g + residual)  # exactly
        assert np.count_nonzero(sent) <= k
        _, expected = tuned.encode(g)
        np.testing.assert_array_equal(sent, expected)
        np.testing.assert_array_equal(new_residual, tuned.residual)
        residual = new_residual


# ---- scaled sign ----------------------------------------------------------------------------
def test_scaled_sign_is_the_mean_magnitude_times_the_sign():
    v = vector(1001).astype(np.float64)
    scale, signs = ref.scaled_sign_encode(v)
    assert signs.dtype == np.int8 and set(np.unique(signs)) == {-1, 1}
    np.testing.assert_array_equal(signs, np.where(v >= 0, 1, -1))
    np.testing.assert_allclose(scale, np.abs(v).sum() / v.size, rtol=1e-12)
    error = scaled_sign(v) - v
    np.testing.assert_allclose(error @ error, v @ v - np.abs(v).sum() ** 2 / v.size, rtol=1e-10)


def test_error_feedback_removes_the_bias_of_scaled_sign():
    """A constant gradient: without feedback the sent sum drifts linearly, with it it stays near."""
    g = np.array([1.0, 0.01, -0.5, 0.2])
    steps = 400
    plain = sum(scaled_sign(g) for _ in range(steps))
    sent_sum, residual = np.zeros_like(g), np.zeros_like(g)
    largest_residual = 0.0
    for _ in range(steps):
        sent, residual = ref.error_feedback(scaled_sign, g, residual)
        sent_sum += sent
        largest_residual = max(largest_residual, np.abs(residual).max())
    np.testing.assert_allclose(sent_sum + residual, steps * g, rtol=1e-12)
    assert np.abs(plain - steps * g).max() > 0.1 * steps  # biased: error ~ steps
    assert largest_residual < 0.01 * steps  # bounded, not growing
