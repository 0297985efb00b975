"""The textbook convolutions (minidl/reference/conv/) against the float64 definition and their
tuned twins.

Each reference algorithm runs through ``F.conv2d(..., algo=name)`` (so the
dispatcher's groups loop and bias are included) for y, dx, dw and db, over
geometries with stride, padding, dilation, groups and non-square shapes.
Also: numerical gradients, the errors for unsupported cases, registration by
``import minidl.reference`` (and ``auto`` never running a reference algorithm,
stubbed or not), and the checks of exercises 3.1-3.5 (pass on the reference,
fail on typical wrong answers).
"""

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import minidl as md
from minidl import exercises
from minidl import functional as F
from minidl.conv.registry import AUTO_CANDIDATES, IMPLEMENTATIONS
from minidl.exercises import Unimplemented
from minidl.reference.conv import DIRECT_REFERENCE, FFT_REFERENCE, REFERENCE_ALGORITHMS
from minidl.reference.conv import im2col as im2col_module
from minidl.reference.conv import winograd as winograd_module

from ..conv import reference
from ..conv.test_conv_algorithms import (
    SHAPES,
    make_case,
    pairs,
    rel_error,
    run_minidl,
    skip_unsupported,
)
from ..conv.test_conv_function import fresh_tuner  # noqa: F401 (a fixture)

TWINS = {
    "direct": "im2col",
    "direct_reference": "direct",
    "im2col_reference": "im2col",
    "fft_reference": "fft",
    "winograd_reference": "winograd_f2x2_3x3",
}
# stride, padding, dilation, groups, non-square kernels and images, partial Winograd tiles
GEOMETRIES = (
    "odd_3x3",
    "batch1_valid",
    "pad3",
    "stride2",
    "dilation2",
    "groups2",
    "groups3_1x3",
    "nonsquare",
    "mixed_s_d",
    "5x5_s2_odd",
    "1x1",
)


@pytest.mark.parametrize("name", GEOMETRIES)
@pytest.mark.parametrize("algo", TWINS)
def test_float64_matches_the_definition_and_the_tuned_twin(algo, name):
    """y, dx, dw and db through F.conv2d (groups loop and bias included), to float64 rounding."""
    x, w, b, params = make_case(SHAPES[name], np.float64, seed=len(name))
    skip_unsupported(algo, x, w, params)
    *mine, dy = run_minidl(x, w, b, params, algo)
    *twin, _ = run_minidl(x, w, b, params, TWINS[algo])
    oracle = (reference.conv2d(x, w, b, **pairs(params)),) + reference.conv2d_grads(
        x, w, dy, **pairs(params)
    )
    for label, got, definition, tuned in zip(("y", "dx", "dw", "db"), mine, oracle, twin):
        assert got.shape == definition.shape, f"{algo} {name} {label}: shape {got.shape}"
        assert rel_error(got, definition) < 1e-10, f"{algo} {name} {label} vs the definition"
        assert rel_error(got, tuned) < 1e-10, f"{algo} {name} {label} vs {TWINS[algo]}"


@pytest.mark.parametrize("algo", TWINS)
def test_float32_keeps_its_dtype_and_agrees_with_the_twin(algo):
    x, w, b, params = make_case(SHAPES["groups2"], np.float32, seed=2)
    for got, tuned in zip(
        run_minidl(x, w, b, params, algo)[:4], run_minidl(x, w, b, params, TWINS[algo])[:4]
    ):
        assert got.dtype == np.float32
        assert rel_error(got, tuned) < 1e-5


@pytest.mark.parametrize(
    "algo,name",
    [
        ("im2col_reference", "mixed_s_d"),
        ("fft_reference", "5x5_s2_odd"),
        ("fft_reference", "dilation2"),
        ("winograd_reference", "groups2"),
        ("direct", "nonsquare"),
    ],
)
def test_gradcheck_float64(algo, name):
    x, w, b, params = make_case(SHAPES[name], np.float64, seed=9)
    tensors = [md.tensor(a, requires_grad=True, dtype="float64") for a in (x[:1], w, b)]
    assert md.gradcheck(lambda x, w, b: F.conv2d(x, w, b, algo=algo, **params), *tensors)


@pytest.mark.parametrize(
    "params,problem",
    [
        (dict(stride=2), "stride (2, 2)"),
        (dict(dilation=2), "dilation (2, 2)"),
        (dict(kernel=5), "5x5 kernel"),
    ],
)
def test_winograd_reference_names_the_problem_and_the_alternatives(params, problem):
    params = dict(params)
    kernel = params.pop("kernel", 3)
    x, w = md.tensor(np.zeros((1, 2, 9, 9))), md.tensor(np.zeros((2, 2, kernel, kernel)))
    with pytest.raises(md.conv.Unsupported) as err:
        F.conv2d(x, w, algo="winograd_reference", **params)
    for words in (
        problem,
        "takes 3x3 kernels at stride 1 and dilation 1 only",
        "'im2col_reference'",
        "'fft_reference'",
        "'direct'",
        "'im2col'",
    ):
        assert words in str(err.value)


def test_the_reference_names_are_registered_but_not_auto_candidates():
    assert md.conv.ALGORITHMS == ("direct", "im2col", "fft", "winograd")
    for name in ("im2col_reference", "fft_reference", "winograd_reference"):
        assert name in md.conv.NAMES and name not in AUTO_CANDIDATES
    assert md.conv.implementation("im2col").name == "im2col"
    assert md.conv.implementation("fft").name == "fft"
    assert md.conv.implementation("winograd").name == "winograd_f4x4_3x3"


def test_a_reference_name_needs_import_minidl_reference():
    """The library never imports the reference tier; without it the name is unknown, and the
    error says how to get it."""
    script = (
        "import sys, minidl as md, numpy as np\n"
        "assert not [m for m in sys.modules if m.startswith(('minidl.reference', "
        "'minidl.exercises'))]\n"
        "x = md.tensor(np.zeros((1, 1, 4, 4)))\n"
        "try:\n    md.functional.conv2d(x, x[:, :, :3, :3], algo='im2col_reference')\n"
        "except ValueError as exc:\n    print(exc)\n"
        "import minidl.reference\n"
        "print(md.functional.conv2d(x, x[:, :, :3, :3], algo='im2col_reference').shape)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    error, shape = done.stdout.strip().splitlines()
    assert "unknown algo 'im2col_reference'" in error and "'import minidl.reference'" in error
    assert shape == "(1, 1, 2, 2)"


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
    for got, expected in (
        (y.numpy(), reference.conv2d(x, w, padding=(1, 1))),
        (tx.grad, dx),
        (tw.grad, dw),
    ):
        assert rel_error(got, expected) < 1e-10


@pytest.mark.parametrize("timing", [False, True])
def test_auto_never_runs_a_reference_algorithm(
    fresh_tuner,  # noqa: F811 (the fixture imported above)
    monkeypatch,
    rng,
    timing,
):
    """A student tree stubs every exercise region: ``auto`` trains on as if they were absent."""
    fresh_tuner.configure(enabled=timing)
    for i, algorithm in enumerate(REFERENCE_ALGORITHMS):
        stub(monkeypatch, algorithm.name, f"3.{i + 1}")
    train_step(rng)
    for choice in fresh_tuner.choices.values():
        assert set(choice.seconds) <= set(AUTO_CANDIDATES)
        assert choice.algorithm in AUTO_CANDIDATES and not choice.excluded


def test_an_explicit_algo_raises_the_stub(monkeypatch, rng):
    stub(monkeypatch, "im2col_reference", "3.1")
    x, w = (
        md.tensor(rng.standard_normal((1, 2, 5, 5))),
        md.tensor(rng.standard_normal((2, 2, 3, 3))),
    )
    with pytest.raises(Unimplemented) as err:
        F.conv2d(x, w, algo="im2col_reference")
    assert err.value.exercise_id == "3.1"
    assert "minidl exercise check 3.1" in str(err.value)


# ------------------------------------------------------ the exercises' checks
CONV_EXERCISES = ["3.1", "3.2", "3.3", "3.4", "3.5"]


@pytest.mark.parametrize("exercise_id", CONV_EXERCISES)
def test_check_passes_on_the_reference(exercise_id):
    found = exercises.get(exercise_id)
    found.check()
    assert found.topic == "conv"
    assert found.path.startswith("minidl/reference/conv/")


def without(field, wrapped, *, method=False):
    """A wrong answer: ``wrapped`` run on the geometry with ``field`` reset to (1, 1)."""
    if method:
        return lambda self, a, b, geom, keep=False: wrapped(
            self, a, b, replace(geom, **{field: (1, 1)})
        )
    return lambda a, geom: wrapped(a, replace(geom, **{field: (1, 1)}))


def rows_in_tap_major_order(col2im):
    """A wrong answer: reads the rows of dA in (u, v, c) order instead of (c, u, v)."""

    def wrong(cols, geom):
        taps = cols.reshape(geom.kernel_h, geom.kernel_w, geom.in_channels, -1)
        return col2im(taps.transpose(2, 0, 1, 3).reshape(cols.shape), geom)

    return wrong


def flipped_kernel(forward):
    """A wrong answer: a convolution (kernel rotated by 180 degrees), not Eq. 2's correlation."""
    return lambda self, x, w, geom, keep=False: forward(self, x, w[:, :, ::-1, ::-1], geom, keep)


def all_stride_one_outputs(forward):
    """A wrong answer: the first OH x OW stride-1 outputs, not every stride-th one."""

    def wrong(self, x, w, geom, keep=False):
        y = forward(self, x, w, replace(geom, stride=(1, 1)))[0]
        return y[:, :, : geom.out_h, : geom.out_w], None

    return wrong


MUTANTS = [  # (exercise, owner, attribute, wrong answer built from the right one)
    ("3.1", im2col_module, "im2col", lambda right: without("stride", right)),
    ("3.1", im2col_module, "im2col", lambda right: without("dilation", right)),
    ("3.2", im2col_module, "col2im", rows_in_tap_major_order),
    ("3.3", type(DIRECT_REFERENCE), "forward", flipped_kernel),
    ("3.4", type(FFT_REFERENCE), "forward", all_stride_one_outputs),
    ("3.4", type(FFT_REFERENCE), "forward", lambda right: without("dilation", right, method=True)),
    ("3.5", winograd_module, "G", lambda right: right * np.array([[1], [2], [2], [1]])),  # no 1/2
]


@pytest.mark.parametrize(
    "exercise_id,owner,name,make_wrong",
    MUTANTS,
    ids=[f"{m[0]}-{m[2]}-{i}" for i, m in enumerate(MUTANTS)],
)
def test_check_fails_on_a_wrong_answer_and_says_what_differs(
    exercise_id, owner, name, make_wrong, monkeypatch
):
    monkeypatch.setattr(owner, name, make_wrong(getattr(owner, name)))
    with pytest.raises(exercises.ExerciseFailure, match="expected"):
        exercises.get(exercise_id).check()
