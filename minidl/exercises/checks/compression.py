"""Checks of the compression exercises: top-k with error feedback, QSGD, TernGrad, scaled sign.

Oracles: the tuned top-k encoder of ``minidl.dist.compression``, exact
invariants (error feedback loses nothing; top-k keeps the k largest
magnitudes), and the schemes' closed forms and expectations. The random
schemes are held to their properties, not to one rounding rule's bits: every
code is the floor or the ceiling of the scaled magnitude with v's sign, the
same seed gives the same codes, and the mean of many draws is v (unbiased),
so that floor(p + u) passes as well as l + (u < p - l).
"""

import numpy as np

from minidl.dist import compression as tuned
from minidl.dist.compression import GradientEncoder, TopK
from minidl.exercises import exercise, expect_close, expect_equal, expect_true
from minidl.exercises.checks.tuned import call_leaving, forbids
from minidl.reference.dist import compression as reference

WHY = "the worker still applies or feeds back the gradient it compressed"

PATH = "minidl/reference/dist/compression.py"
LENGTH = 257  # values per test vector
DRAWS = 2000  # seeded draws for the unbiasedness checks
SIGMAS = 5.0  # how many standard deviations of the mean of DRAWS draws a bias may hide in


def gradient_like(rng, n):
    """Normal values with a few large ones and exact zeros, like a real gradient (float32)."""
    v = rng.standard_normal(n).astype(np.float32)
    v[::7] *= 30
    v[3::11] = 0
    return v


def expect_unbiased(what, draw, v, spread):
    """The mean of DRAWS draws must lie within SIGMAS standard errors of ``v``.

    ``spread`` bounds the standard deviation of one draw's element (a value
    that falls on one of two neighbouring levels a width w apart varies by at
    most w / 2).
    """
    mean = np.mean([draw() for _ in range(DRAWS)], axis=0, dtype=np.float64)
    expect_close(
        f"{what}: the mean of {DRAWS} seeded draws against the input (E[Q(v)] = v)",
        mean,
        v,
        rtol=0,
        atol=SIGMAS * spread / np.sqrt(DRAWS),
    )


@exercise(
    "9.1",
    "Top-k sparsification with error feedback",
    path=PATH,
    hint="top-k: sort the indices by decreasing |v| and keep the first k; error feedback: "
    "compress gradient + residual and keep what was not sent as the new residual",
)
@forbids(tuned, name="minidl's tuned compressors (minidl.dist.compression)")
def check_topk_error_feedback():
    rng = np.random.default_rng(91)
    n, ratio = 300, 0.05
    k = TopK(ratio).count(n)
    v = gradient_like(rng, n)
    index, values = call_leaving(f"top-{k} of {n}", reference.topk_encode, {"v": v}, WHY, k=k)
    index = np.asarray(index)
    expect_equal(
        f"top-{k} of {n}: how many distinct indices were kept", len(set(index.tolist())), k
    )
    expect_close(
        f"top-{k}: the values sent, against v at the indices sent",
        values,
        v[index],
        rtol=0,
        atol=0,
        from_code=True,
    )
    dropped = np.delete(np.abs(v), index)
    expect_true(
        f"top-{k}: every kept magnitude is at least every dropped one",
        np.abs(values).min() >= dropped.max(),
        detail=f"smallest kept |v| {np.abs(values).min()}, largest dropped {dropped.max()}",
    )

    def compress(x):
        return reference.topk_decode(*reference.topk_encode(x, k), x.size)

    tuned = GradientEncoder(TopK(ratio), n, error_feedback=True)
    residual = np.zeros(n, dtype=np.float32)
    for step in range(5):
        g = gradient_like(rng, n)
        corrected = g + residual
        sent, new_residual = call_leaving(
            f"error feedback, step {step}",
            lambda gradient, old: reference.error_feedback(compress, gradient, old),
            {"gradient": g, "residual": residual},
            WHY,
        )
        expect_close(
            f"step {step}: sent + new residual against gradient + old residual (exactly)",
            sent + new_residual,
            corrected,
            rtol=0,
            atol=0,
            from_code=True,
        )
        _, expected = tuned.encode(g)
        expect_close(
            f"step {step}: the vector sent, against the tuned top-k encoder",
            sent,
            expected,
            rtol=0,
            atol=0,
        )
        expect_close(
            f"step {step}: the residual kept, against the tuned top-k encoder",
            new_residual,
            tuned.residual,
            rtol=0,
            atol=0,
        )
        residual = new_residual
    expect_feedback_rule(rng, n, k)


def expect_feedback_rule(rng, n, k):
    """The residual is e' = (g + e) - C(g + e), not "(g + e) where nothing was sent": with a
    compressor that rounds the values it keeps (top-k to multiples of 1/4) the two differ
    at the sent indices too."""

    def rounded_topk(x):
        kept = np.argsort(-np.abs(x), kind="stable")[:k]
        out = np.zeros_like(x)
        out[kept] = np.round(4 * x[kept]) / 4
        return out

    residual = 0.1 * gradient_like(rng, n)
    g = gradient_like(rng, n)
    corrected = g + residual
    sent, new_residual = reference.error_feedback(rounded_topk, g, residual)
    expect_close(
        "error feedback with a compressor that rounds what it keeps: the vector sent, C(g + e)",
        sent,
        rounded_topk(corrected),
        rtol=0,
        atol=0,
    )
    expect_close(
        "error feedback with a compressor that rounds what it keeps: the new residual "
        "e' = (g + e) - C(g + e), which also keeps the rounding error of the values sent",
        new_residual,
        corrected - rounded_topk(corrected),
        rtol=0,
        atol=0,
    )


def expect_deterministic(what, encode, v, seed):
    """Two calls with generators of the same seed give the same codes: the draws come from
    ``rng``, not from a global generator."""
    first = encode(v, np.random.default_rng(seed))
    again = encode(v, np.random.default_rng(seed))
    expect_close(
        f"{what}: the codes of two calls with the same seed (draw from rng only)",
        np.asarray(again[1]),
        np.asarray(first[1]),
        rtol=0,
        atol=0,
        from_code=True,
    )


def expect_rounded(what, codes, v, p):
    """Every code is sgn(v_i) times floor(p_i) or floor(p_i) + 1 (``p``: the exact scaled
    magnitudes, each allowed a rounding error of 1e-3 at an integer)."""
    codes, slack = np.asarray(codes), 1e-3
    low, high = np.floor(p - slack), np.floor(p + slack) + 1
    bad = (
        (np.abs(codes) < low) | (np.abs(codes) > high) | (codes * v < 0) | ((v == 0) & (codes != 0))
    )
    index = int(np.argmax(bad))
    expect_true(
        f"{what}: every code is sgn(v_i) times floor(p_i) or floor(p_i) + 1",
        not bad.any(),
        detail=f"{int(bad.sum())} codes are not; at index {index}: v_i = {v[index]}, "
        f"p_i = {p[index]:.6g}, code {codes[index]}",
    )


@exercise(
    "9.2",
    "QSGD: stochastic quantisation to s levels",
    path=PATH,
    hint="with p_i = s |v_i| / ||v||_2, send sgn(v_i) times floor(p_i) + 1 with probability "
    "p_i - floor(p_i) and floor(p_i) otherwise (any such rounding: uniform draws from rng)",
)
@forbids(tuned, name="minidl's tuned compressors (minidl.dist.compression)")
def check_qsgd():
    v = gradient_like(np.random.default_rng(92), LENGTH)
    exact = np.linalg.norm(v.astype(np.float64))
    for s in (1, 4, 127):
        norm, signed = call_leaving(
            f"QSGD s={s}",
            reference.qsgd_encode,
            {"v": v},
            WHY,
            levels=s,
            rng=np.random.default_rng([92, s]),
        )
        expect_close(f"QSGD s={s}: the norm sent, ||v||_2", norm, exact, rtol=1e-6)
        signed = np.asarray(signed)
        expect_true(
            f"QSGD s={s}: every signed level is an integer in -s..s",
            bool(np.all(signed == np.round(signed)) and np.all(np.abs(signed) <= s)),
            detail=f"levels seen: {np.unique(signed)[:10]}",
        )
        expect_rounded(f"QSGD s={s}", signed, v, s * np.abs(v.astype(np.float64)) / exact)
        expect_deterministic(
            f"QSGD s={s}", lambda x, rng: reference.qsgd_encode(x, s, rng), v, [92, s]
        )
    small, draws = v[:12].astype(np.float64), np.random.default_rng(920)
    expect_unbiased(
        "QSGD s=3",
        lambda: reference.qsgd_decode(*reference.qsgd_encode(small, 3, draws), 3),
        small,
        spread=np.linalg.norm(small) / 3 / 2,
    )


@exercise(
    "9.3",
    "TernGrad: ternary stochastic gradients",
    path=PATH,
    hint="s is the largest |v_i|; send sign(v_i) with probability |v_i| / s, else 0 "
    "(uniform draws from rng)",
)
@forbids(tuned, name="minidl's tuned compressors (minidl.dist.compression)")
def check_terngrad():
    v = gradient_like(np.random.default_rng(93), LENGTH)
    scale, ternary = call_leaving(
        "TernGrad", reference.terngrad_encode, {"v": v}, WHY, rng=np.random.default_rng(930)
    )
    expect_close("TernGrad: the scale s = max |v_i|", scale, np.abs(v).max(), rtol=0, atol=0)
    ternary = np.asarray(ternary)
    expect_true(
        "TernGrad: every code is -1, 0 or 1 with the sign of v",
        bool(np.all(np.isin(ternary, (-1, 0, 1))) and np.all(ternary * v >= 0)),
        detail=f"codes seen: {np.unique(ternary)}",
    )
    expect_rounded("TernGrad", ternary, v, np.abs(v.astype(np.float64)) / np.abs(v).max())
    expect_deterministic("TernGrad", reference.terngrad_encode, v, 930)
    small, draws = v[:12].astype(np.float64), np.random.default_rng(931)
    expect_unbiased(
        "TernGrad",
        lambda: reference.terngrad_decode(*reference.terngrad_encode(small, draws)),
        small,
        spread=np.abs(small).max() / 2,
    )


@exercise(
    "9.4",
    "Scaled sign, the compressor of error-feedback signSGD",
    path=PATH,
    hint="the scale is the mean of |v_i|; the sign is +1 where v_i >= 0 and -1 elsewhere",
)
@forbids(tuned, name="minidl's tuned compressors (minidl.dist.compression)")
def check_scaled_sign():
    rng = np.random.default_rng(94)
    v = gradient_like(rng, 101).astype(np.float64)
    scale, signs = call_leaving("scaled sign", reference.scaled_sign_encode, {"v": v}, WHY)
    expect_close("scaled sign: the scale ||v||_1 / d", scale, np.abs(v).mean(), rtol=1e-12)
    expect_close(
        "scaled sign: the signs (+1 for v_i >= 0)",
        np.asarray(signs),
        np.where(v >= 0, 1, -1),
        rtol=0,
        atol=0,
    )
    error = reference.scaled_sign_decode(scale, signs) - v
    expect_close(
        "scaled sign: ||C(v) - v||^2 against ||v||^2 - ||v||_1^2 / d",
        error @ error,
        v @ v - np.abs(v).sum() ** 2 / v.size,
        rtol=1e-10,
    )
