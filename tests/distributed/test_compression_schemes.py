"""Gradient compressors (one process): wire sizes, unbiasedness, error feedback, errors."""

import math

import numpy as np
import pytest

from minidl.dist.compression import (
    QSGD,
    Float16,
    GradientEncoder,
    Sign,
    TernGrad,
    TopK,
    pack_codes,
    unpack_codes,
)
from minidl_app.cli.specs import parse_compression

LENGTHS = (1, 7, 511, 512, 1000, 4099)


def vector(n, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n).astype(np.float32)
    v[::7] *= 30  # a few large values, as in real gradients
    v[3::11] = 0  # and exact zeros
    return v


def formula_bytes(spec, n):
    """Bytes on the wire, written from the schemes' definitions (not from the code)."""
    name, *fields = spec.split(":")
    buckets = lambda b: math.ceil(n / b)  # noqa: E731
    if name == "none":
        return 4 * n
    if name == "fp16":
        return 2 * n
    if name == "qsgd":
        s, b = int(fields[0]), int(fields[1]) if len(fields) > 1 else 512
        bits = next(w for w in (2, 4, 8, 16) if 2**w >= 2 * s + 1)  # signed level in [-s, s]
        return 4 * buckets(b) + math.ceil(n * bits / 8)
    if name == "terngrad":
        b = int(fields[0]) if fields else 512
        return 4 * buckets(b) + math.ceil(2 * n / 8)
    if name == "sign":
        b = int(fields[0]) if fields else 512
        return 8 * buckets(b) + math.ceil(n / 8)
    if name == "topk":
        return 8 * math.ceil(float(fields[0]) * n)
    raise AssertionError(spec)


SPECS = (
    "none",
    "fp16",
    "qsgd:1",
    "qsgd:4",
    "qsgd:7:100",
    "qsgd:127",
    "qsgd:300",
    "terngrad",
    "terngrad:33",
    "sign",
    "sign:64",
    "topk:0.01",
    "topk:0.3",
)


@pytest.mark.parametrize("spec", SPECS)
def test_bytes_on_the_wire_match_the_formula(spec):
    compressor = parse_compression(spec)
    for n in LENGTHS:
        payload = compressor.encode(vector(n), np.random.default_rng(1))
        assert payload.dtype == np.uint8
        assert payload.nbytes == compressor.wire_bytes(n) == formula_bytes(spec, n), (spec, n)
        decoded = compressor.decode(payload, n)
        assert decoded.shape == (n,) and decoded.dtype == np.float32


def test_topk_one_percent_sends_two_percent_of_the_float32_bytes():
    n = 61706  # LeNet-5
    assert TopK(0.01).wire_bytes(n) == 8 * 618
    assert TopK(0.01).wire_bytes(n) / (4 * n) < 0.021


@pytest.mark.parametrize("bits", (1, 2, 4, 8, 16))
def test_bit_packing_round_trips(bits):
    rng = np.random.default_rng(bits)
    for n in (0, 1, 3, 8, 13, 1001):
        codes = rng.integers(0, 2**bits, n).astype(np.uint16)
        packed = pack_codes(codes, bits)
        assert packed.nbytes == math.ceil(n * bits / 8)
        assert np.array_equal(unpack_codes(packed, n, bits), codes)


def test_lossless_and_deterministic_schemes_decode_exactly():
    v = vector(1000)
    none = parse_compression("none")
    assert np.array_equal(none.decode(none.encode(v), 1000), v)
    half = parse_compression("fp16")
    assert np.array_equal(
        half.decode(half.encode(v), 1000), v.astype(np.float16).astype(np.float32)
    )
    top = TopK(0.05)
    sent = top.decode(top.encode(v), 1000)
    kept = np.flatnonzero(sent)
    assert len(kept) <= 50 and np.array_equal(sent[kept], v[kept])
    assert np.abs(v[sent == 0]).max() <= np.abs(v[kept]).min()  # the 50 largest were kept


def _bernstein_halfwidth(variance, width, draws, delta):
    """t with P(|mean of `draws` iid - expectation| >= t) <= delta (Bernstein's inequality).

    For iid X with |X - EX| <= width and Var X = variance:
    P(|mean - EX| >= t) <= 2 exp(-draws t^2 / (2 variance + 2 width t / 3)).
    """
    log_term = math.log(2 / delta)
    a = 2 * width * log_term / 3
    return (a + np.sqrt(a * a + 8 * draws * variance * log_term)) / (2 * draws)


def _level_variance(v, bucket, step_of):
    """Per-element (variance, range) of a stochastic rounding to multiples of step_of(bucket)."""
    n = v.size
    padded = np.zeros(math.ceil(n / bucket) * bucket)
    padded[:n] = np.abs(v.astype(np.float64))
    blocks = padded.reshape(-1, bucket)
    step = step_of(blocks)[:, None] * np.ones_like(blocks)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(step > 0, blocks / step - np.floor(blocks / step), 0.0)
    variance = (step**2 * frac * (1 - frac)).reshape(-1)[:n]
    return variance, step.reshape(-1)[:n]


def _assert_unbiased(compressor, v, variance, width, draws=3000, failure=1e-6):
    """The mean of ``draws`` compressions is within the Bernstein bound of v, element-wise."""
    rng = np.random.default_rng(123)
    total = np.zeros(v.size)
    for _ in range(draws):
        total += compressor.decode(compressor.encode(v, rng), v.size)
    mean = total / draws
    bound = _bernstein_halfwidth(variance, width, draws, failure / v.size)
    bound += 1e-6 * np.abs(v) + 1e-12  # float32 rounding of the levels
    worst = np.max(np.abs(mean - v) / bound)
    return worst


@pytest.mark.parametrize("levels,bucket", ((1, 64), (4, 512), (15, 100)))
def test_qsgd_is_unbiased(levels, bucket):
    """E[Q(v)] = v: Q_i is ||v|| / s times a level rounded up with probability
    frac(s |v_i| / ||v||)."""
    v = vector(600, seed=levels)
    step = lambda blocks: np.sqrt((blocks**2).sum(axis=1)) / levels  # noqa: E731
    variance, width = _level_variance(v, bucket, step)
    assert _assert_unbiased(QSGD(levels, bucket), v, variance, width) <= 1.0


def test_terngrad_is_unbiased():
    """E[Q(v)] = v: Q_i = s sgn(v_i) b_i, b_i ~ Bernoulli(|v_i| / s), s = max |v| per bucket."""
    v = vector(600, seed=5)
    step = lambda blocks: blocks.max(axis=1)  # noqa: E731
    variance, width = _level_variance(v, 128, step)
    assert _assert_unbiased(TernGrad(128), v, variance, width) <= 1.0


class _NeverRoundUp:
    """A "generator" whose uniform draws are all 1: stochastic rounding becomes floor."""

    def random(self, shape, dtype=None):
        return np.ones(shape, dtype=dtype)


def test_the_unbiasedness_test_catches_biased_quantisers():
    """The same statistical test rejects 1-bit sign and a QSGD that always rounds down."""
    v = vector(600, seed=5)
    step = lambda blocks: blocks.max(axis=1)  # noqa: E731
    variance, width = _level_variance(v, 128, step)
    assert _assert_unbiased(Sign(128), v, variance, width, draws=200) > 1.0
    floor_qsgd = QSGD(4, 512)
    floor_qsgd.encode = lambda x, rng: QSGD.encode(floor_qsgd, x, _NeverRoundUp())
    step = lambda blocks: np.sqrt((blocks**2).sum(axis=1)) / 4  # noqa: E731
    variance, width = _level_variance(v, 512, step)
    assert _assert_unbiased(floor_qsgd, v, variance, width, draws=200) > 1.0


def test_qsgd_variance_is_within_the_papers_bound():
    """Alistarh et al. 2017, Lemma 3.1: E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2."""
    rng = np.random.default_rng(0)
    for levels, d in ((1, 256), (4, 256), (16, 64)):
        v = vector(d, seed=levels)
        q = QSGD(levels, bucket=d)
        errors = [np.sum((q.decode(q.encode(v, rng), d) - v) ** 2) for _ in range(400)]
        bound = min(d / levels**2, math.sqrt(d) / levels) * np.sum(v.astype(np.float64) ** 2)
        assert np.mean(errors) <= bound


@pytest.mark.parametrize("spec", ("topk:0.01", "sign", "qsgd:2", "terngrad", "fp16"))
def test_error_feedback_conserves_the_gradient_sum(spec):
    """sum(sent) + residual = sum(g) over any run of steps (per step: sent + r' = g + r).

    In float32, v = g + r and r' = v - sent are each rounded once (relative
    error <= eps), so the drift of element i is at most sum_t eps (|v_t| + |r'_t|).
    """
    n, steps = 2000, 40
    eps = np.finfo(np.float32).eps
    encoder = GradientEncoder(parse_compression(spec), n, error_feedback=True, seed=3)
    rng = np.random.default_rng(9)
    sent_total, grad_total, rounding = np.zeros(n), np.zeros(n), np.zeros(n)
    for _ in range(steps):
        g = rng.standard_normal(n).astype(np.float32)
        before = encoder.residual.copy()
        _, sent = encoder.encode(g)
        accumulated = g + before  # what this step had to send, in float32
        if spec.startswith("topk"):  # kept values move whole, the rest stays: exact
            assert np.array_equal(sent + encoder.residual, accumulated)
        else:
            assert np.allclose(
                sent + encoder.residual,
                accumulated,
                rtol=0,
                atol=1e-5 * (1 + np.abs(accumulated).max()),
            )
        sent_total += sent
        grad_total += g
        rounding += eps * (np.abs(accumulated) + np.abs(encoder.residual))
    drift = np.abs(sent_total + encoder.residual - grad_total)
    assert (drift <= rounding + 1e-12).all(), (drift - rounding).max()
    assert np.abs(encoder.residual).max() > 0  # something was held back


def test_without_error_feedback_topk_loses_what_it_drops():
    encoder = GradientEncoder(TopK(0.01), 1000, error_feedback=False)
    g = vector(1000)
    _, sent = encoder.encode(g)
    assert encoder.residual is None and np.count_nonzero(sent) == 10


def test_defaults_and_errors():
    assert GradientEncoder(TopK(0.1), 10).residual is not None  # biased: feedback on
    assert GradientEncoder(QSGD(4), 10).residual is None  # unbiased: off
    for bad, hint in (
        ("zip", "unknown compression"),
        ("topk:2", "ratio must be in (0, 1]"),
        ("qsgd", "unknown compression"),
        ("qsgd:0", "levels must be"),
        ("sign:0", "bucket size must be"),
        ("topk:x", "qsgd:LEVELS"),
    ):
        with pytest.raises(
            ValueError,
            match=hint.replace("(", r"\(")
            .replace(")", r"\)")
            .replace("[", r"\[")
            .replace("]", r"\]"),
        ):
            parse_compression(bad)
    with pytest.raises(ValueError, match="expected 10 values"):
        GradientEncoder(Float16(), 10).encode(np.zeros(11, np.float32))
    with pytest.raises(TypeError, match="TopK"):
        GradientEncoder("topk:0.1", 10)  # a spec string: parse it first
