"""The textbook convolutions (minidl/reference/conv/) against the float64 definition and their tuned twins.

Each reference algorithm runs through ``F.conv2d(..., algo=name)`` (so the
dispatcher's groups loop and bias are included) for y, dx, dw and db, over
geometries with stride, padding, dilation, groups and non-square shapes.
Also: numerical gradients, the errors for unsupported cases, and ``auto``
skipping algorithms whose exercise region is stubbed.
"""
import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl.conv.registry import AUTO_CANDIDATES, IMPLEMENTATIONS
from minidl.exercises import Unimplemented

from ..conv import reference
from ..conv.test_conv_function import fresh_tuner  # noqa: F401 (a fixture)

TWINS = {"direct": "im2col", "im2col_reference": "im2col", "fft_reference": "fft",
         "winograd_reference": "winograd_f2x2_3x3"}

# (N, C, H, W, K, (KH, KW), stride, padding, dilation, groups)
GEOMETRIES = {
    "3x3_pad1": (2, 3, 7, 9, 4, (3, 3), 1, 1, 1, 1),
    "3x3_valid_odd_output": (1, 2, 8, 7, 3, (3, 3), 1, 0, 1, 1),
    "3x3_pad3_groups2": (2, 4, 6, 7, 6, (3, 3), 1, 3, 1, 2),
    "stride_nonsquare": (2, 3, 11, 9, 4, (3, 5), (2, 1), (1, 2), 1, 1),
    "dilation_stride": (2, 2, 12, 10, 3, (2, 3), (1, 2), (2, 0), (2, 3), 1),
    "5x5_stride2_groups3": (1, 6, 9, 8, 3, (5, 5), 2, 2, 1, 3),
    "1x1": (2, 4, 5, 6, 2, (1, 1), 1, 0, 1, 1),
}


def case(name, dtype, seed):
    n, c, h, w, k, kernel, stride, padding, dilation, groups = GEOMETRIES[name]
    rng = np.random.default_rng(seed)
    arrays = (rng.standard_normal((n, c, h, w)), rng.standard_normal((k, c // groups) + kernel),
              rng.standard_normal(k))
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return tuple(a.astype(dtype) for a in arrays), params


def as_pairs(params):
    return {k: v if k == "groups" or not isinstance(v, int) else (v, v) for k, v in params.items()}


def conv_passes(algo, arrays, params, dy):
    """y, dx, dw, db of F.conv2d with ``algo`` for the output gradient ``dy``."""
    dtype = arrays[0].dtype.name
    x, w, b = (md.tensor(a, requires_grad=True, dtype=dtype) for a in arrays)
    y = F.conv2d(x, w, b, algo=algo, **params)
    y.backward(md.tensor(dy, dtype=dtype))
    return y.numpy(), x.grad, w.grad, b.grad


def unsupported(algo, arrays, params):
    geom = md.conv.make_geometry(arrays[0].shape, arrays[1].shape, **params)
    return IMPLEMENTATIONS[algo].unsupported(geom.per_group())


def relative_error(got, expected):
    expected = np.asarray(expected, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("name", GEOMETRIES)
@pytest.mark.parametrize("algo", TWINS)
def test_float64_matches_the_definition_and_the_tuned_twin(algo, name):
    arrays, params = case(name, np.float64, seed=len(name))
    reason = unsupported(algo, arrays, params)
    if reason:
        pytest.skip(f"{algo}: {reason}")
    geom = md.conv.make_geometry(arrays[0].shape, arrays[1].shape, **params)
    dy = np.random.default_rng(5).standard_normal(geom.output_shape)
    mine = conv_passes(algo, arrays, params, dy)
    twin = conv_passes(TWINS[algo], arrays, params, dy)
    x, w, b = arrays
    oracle = (reference.conv2d(x, w, b, **as_pairs(params)),) + reference.conv2d_grads(
        x, w, dy, **as_pairs(params))
    for label, got, definition, tuned in zip(("y", "dx", "dw", "db"), mine, oracle, twin):
        assert got.shape == definition.shape, f"{algo} {name} {label}: shape {got.shape}"
        assert relative_error(got, definition) < 1e-10, f"{algo} {name} {label} vs the definition"
        assert relative_error(got, tuned) < 1e-10, f"{algo} {name} {label} vs {TWINS[algo]}"


@pytest.mark.parametrize("algo", TWINS)
def test_float32_keeps_its_dtype_and_agrees_with_the_twin(algo):
    arrays, params = case("3x3_pad3_groups2", np.float32, seed=2)
    dy = np.random.default_rng(6).standard_normal((2, 6, 10, 11)).astype(np.float32)
    for got, tuned in zip(conv_passes(algo, arrays, params, dy),
                          conv_passes(TWINS[algo], arrays, params, dy)):
        assert got.dtype == np.float32
        assert relative_error(got, tuned) < 1e-5


@pytest.mark.parametrize("algo,name", [("im2col_reference", "dilation_stride"),
                                       ("fft_reference", "5x5_stride2_groups3"),
                                       ("fft_reference", "dilation_stride"),
                                       ("winograd_reference", "3x3_pad1"),
                                       ("direct", "stride_nonsquare")])
def test_gradcheck_float64(algo, name):
    (x, w, b), params = case(name, np.float64, seed=9)
    tensors = [md.tensor(a[:1] if a is x else a, requires_grad=True, dtype="float64") for a in (x, w, b)]
    assert md.gradcheck(lambda x, w, b: F.conv2d(x, w, b, algo=algo, **params), *tensors)


@pytest.mark.parametrize("params,problem", [(dict(stride=2), "stride (2, 2)"),
                                            (dict(dilation=2), "dilation (2, 2)"),
                                            (dict(kernel=5), "5x5 kernel")])
def test_winograd_reference_names_the_problem_and_the_alternatives(params, problem):
    params = dict(params)
    kernel = params.pop("kernel", 3)
    x, w = md.tensor(np.zeros((1, 2, 9, 9))), md.tensor(np.zeros((2, 2, kernel, kernel)))
    with pytest.raises(md.conv.Unsupported) as err:
        F.conv2d(x, w, algo="winograd_reference", **params)
    for words in (problem, "takes 3x3 kernels at stride 1 and dilation 1 only", "'im2col_reference'",
                  "'fft_reference'", "'direct'", "'im2col'"):
        assert words in str(err.value)


def test_the_reference_names_are_registered_but_not_auto_candidates():
    assert md.conv.ALGORITHMS == ("direct", "im2col", "fft", "winograd")
    for name in ("im2col_reference", "fft_reference", "winograd_reference"):
        assert name in md.conv.NAMES and name not in AUTO_CANDIDATES
    assert md.conv.implementation("im2col").name == "im2col"
    assert md.conv.implementation("fft").name == "fft"
    assert md.conv.implementation("winograd").name == "winograd_f4x4_3x3"


# ------------------------------------------------- auto and stubbed exercises
def stub(monkeypatch, name, exercise_id):
    """Make every pass of algorithm ``name`` raise Unimplemented, as a stubbed region does."""
    def raise_unimplemented(*args, **kwargs):
        raise Unimplemented(exercise_id)
    for pass_ in md.conv.PASSES:
        monkeypatch.setattr(type(IMPLEMENTATIONS[name]), pass_, raise_unimplemented)


def train_step(rng):
    """One forward and backward pass of a small convolution, checked against the definition."""
    x, w = rng.standard_normal((2, 3, 8, 8)), rng.standard_normal((4, 3, 3, 3))
    tx, tw = (md.tensor(a, requires_grad=True, dtype="float64") for a in (x, w))
    y = F.conv2d(tx, tw, padding=1)
    y.sum().backward()
    dx, dw, _ = reference.conv2d_grads(x, w, np.ones(y.shape), padding=(1, 1))
    for got, expected in ((y.numpy(), reference.conv2d(x, w, padding=(1, 1))), (tx.grad, dx),
                          (tw.grad, dw)):
        assert relative_error(got, expected) < 1e-10


def test_fixed_rule_skips_a_stubbed_pick(fresh_tuner, monkeypatch, rng):  # noqa: F811
    fresh_tuner.configure(enabled=False)
    stub(monkeypatch, "im2col", "3.1")          # the rule's pick for three input channels
    train_step(rng)
    assert len(fresh_tuner.choices) == 3
    for choice in fresh_tuner.choices.values():
        assert choice.algorithm != "im2col"
        assert choice.excluded["im2col"] == "not implemented yet (exercise 3.1)"
    assert "not a candidate: not implemented yet (exercise 3.1)" in md.conv.report()
    train_step(rng)                             # the choice is kept: no new exclusion needed
    assert len(fresh_tuner.choices) == 3


def test_timing_skips_a_stubbed_candidate(fresh_tuner, monkeypatch, rng):  # noqa: F811
    stub(monkeypatch, "direct", "3.3")
    train_step(rng)
    for choice in fresh_tuner.choices.values():
        assert "direct" not in choice.seconds
        assert set(choice.seconds) == set(AUTO_CANDIDATES) - {"direct"}
        assert choice.excluded == {"direct": "not implemented yet (exercise 3.3)"}
    assert "not implemented yet (exercise 3.3)" in md.conv.report()


@pytest.mark.parametrize("timing", [False, True])
def test_auto_raises_the_stub_when_every_candidate_is_stubbed(fresh_tuner, monkeypatch, rng,  # noqa: F811
                                                              timing):
    fresh_tuner.configure(enabled=timing)
    for i, name in enumerate(AUTO_CANDIDATES):
        stub(monkeypatch, name, f"3.{i + 1}")
    with pytest.raises(Unimplemented):
        train_step(rng)


def test_an_explicit_algo_raises_the_stub(monkeypatch, rng):
    stub(monkeypatch, "im2col_reference", "3.1")
    x, w = md.tensor(rng.standard_normal((1, 2, 5, 5))), md.tensor(rng.standard_normal((2, 2, 3, 3)))
    with pytest.raises(Unimplemented) as err:
        F.conv2d(x, w, algo="im2col_reference")
    assert err.value.exercise_id == "3.1"
    assert "minidl exercise check 3.1" in str(err.value)
