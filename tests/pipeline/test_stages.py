"""Cutting a Sequential into stages: uniform, by parameters, at given points; refusals."""

import numpy as np
import pytest

import minidl as md
from minidl import layers as L
from minidl.dist.pipeline import partition
from minidl.dist.pipeline.trainer import build_stage


def model():
    md.manual_seed(0)
    return L.Sequential(
        L.Linear(4, 64), L.ReLU(), L.Linear(64, 8), L.ReLU(), L.Linear(8, 8), L.Linear(8, 3)
    )


def test_uniform_cut_differs_by_at_most_one_layer():
    cut = partition(model(), 4)
    assert cut.bounds == ((0, 2), (2, 4), (4, 5), (5, 6))
    assert cut.costs == (2, 2, 1, 1) and cut.balance == pytest.approx(2 / 1.5)
    assert partition(model(), 1).bounds == ((0, 6),)
    assert partition(model(), 6).balance == 1.0


def test_parameter_cut_minimises_the_largest_stage():
    m = model()
    sizes = [layer.num_parameters() for layer in m]  # 320, 0, 520, 0, 72, 27
    cut = partition(m, 2, by="parameters")
    assert cut.bounds == ((0, 1), (1, 6))  # ties keep the earliest cut
    assert cut.costs == (320, 619) and max(cut.costs) == min(
        max(sum(sizes[:i]), sum(sizes[i:])) for i in range(1, 6)
    )
    assert cut.balance == pytest.approx(619 / (939 / 2))
    assert all(b > a for a, b in cut.bounds)


def test_user_cuts_and_the_stage_keeps_serial_names():
    m = model()
    cut = partition(m, 3, by="parameters", cuts=[2, 5])
    assert cut.bounds == ((0, 2), (2, 5), (5, 6)) and cut.costs == (320, 592, 27)
    stage = build_stage(m, cut, 1)
    assert [name for name, _ in stage.named_parameters()] == [
        "2.weight",
        "2.bias",
        "4.weight",
        "4.bias",
    ]
    x = md.Tensor(np.ones((2, 4), dtype=np.float32))
    parts = [build_stage(m, cut, k) for k in range(3)]
    y = parts[2](parts[1](parts[0](x)))
    np.testing.assert_array_equal(y.data, m(x).data)


@pytest.mark.parametrize(
    "stages, options, message",
    [
        (7, {}, "cannot cut a model of 6 layers into 7 stages .* use at most 6 stages"),
        (0, {}, "at least 1 stage, got 0"),
        (-2, {}, "at least 1 stage, got -2"),
        (2, {"by": "flops"}, "choose one of layers, parameters"),
        (3, {"cuts": [2]}, "3 stages need 2 cut points"),
        (3, {"cuts": [4, 2]}, "must increase strictly within 1..5"),
        (2, {"cuts": [6]}, "must increase strictly within 1..5"),
        (2, {"cuts": [0]}, "must increase strictly within 1..5"),
    ],
)
def test_bad_input_is_refused_with_what_fits(stages, options, message):
    with pytest.raises(ValueError, match=message):
        partition(model(), stages, **options)


def test_only_a_sequential_is_cut():
    with pytest.raises(TypeError, match=r"write the model as L.Sequential"):
        partition(L.Linear(2, 2), 1)
    with pytest.raises(TypeError, match="must be an int"):
        partition(model(), 2.0)
