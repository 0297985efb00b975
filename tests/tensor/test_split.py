"""How a dimension is split over ranks, and the refusals of layers too narrow to split."""

import types

import numpy as np
import pytest

from minidl import layers as L
from minidl.dist import tensor as tp
from minidl.dist.tensor.functions import take_block


@pytest.mark.parametrize("n, parts", [(7, 1), (7, 2), (7, 3), (7, 4), (8, 4), (4, 4)])
def test_blocks_cover_the_dimension_in_order_and_differ_by_at_most_one(n, parts):
    split = tp.Split(n, parts)
    assert sum(split.sizes) == n and max(split.sizes) - min(split.sizes) <= 1
    assert max(split.sizes) == split.largest
    a = np.arange(3 * n).reshape(3, n)
    blocks = [take_block(a, 1, r, parts) for r in range(parts)]
    assert np.array_equal(np.concatenate(blocks, axis=1), a)


def fake_group(size, rank=0):
    return types.SimpleNamespace(size=size, rank=rank)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda g: tp.ColumnParallelLinear(L.Linear(8, 3), g), "3 outputs cannot be split over 4"),
        (lambda g: tp.RowParallelLinear(L.Linear(3, 8), g), "3 inputs cannot be split over 4"),
        (lambda g: tp.FilterParallelConv2d(L.Conv2d(1, 3, 3), g), "3 filters"),
        (lambda g: tp.InputChannelParallelConv2d(L.Conv2d(3, 8, 3), g), "3 input channels"),
        (lambda g: tp.FilterParallelConv2d(L.Conv2d(4, 8, 3, groups=2), g), "grouped"),
    ],
)
def test_a_layer_narrower_than_the_group_is_refused_with_what_would_fit(make, words):
    with pytest.raises(ValueError) as error:
        make(fake_group(4))
    assert words in str(error.value)


def test_the_rule_pairs_lenet5s_layers_and_gathers_before_flatten_and_at_the_end():
    from minidl import models

    lenet5 = ["filter", "", "", "input", "", "", "", "column", "", "row", "", "column+gather"]
    assert tp.plan(models.lenet5()) == lenet5
    assert tp.plan(models.mlp(hidden=(8, 8, 8))) == ["", "column", "", "row"] * 2


def test_a_grid_wider_than_a_layer_is_refused_naming_the_layer_and_what_fits():
    from minidl import models

    with pytest.raises(tp.PlacementError) as error:
        tp.TensorParallel(models.lenet5(), fake_group(8))
    assert "tp=8 is wider than layer 0" in str(error.value) and "tp <= 6 fits" in str(error.value)


@pytest.mark.parametrize(
    "words, problem",
    [
        (["column", "column+gather"], "make it row"),
        (["column", "row+gather"], "already whole"),
        (["column", ""], "needs its whole input"),
        (["row", "filter"], "cannot be filter-parallel"),
        (["column", "rows"], "unknown plan word"),
        (["column"], "give one word per layer"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_with_the_fix(words, problem):
    model = L.Sequential(L.Linear(4, 6), L.Linear(6, 3))
    with pytest.raises(tp.PlacementError) as error:
        tp.TensorParallel(model, fake_group(2), words)
    assert problem in str(error.value)


def test_one_weird_trick_runs_the_layers_before_the_first_linear_on_blocks_of_the_batch():
    from minidl import models

    words = tp.one_weird_trick_plan(models.lenet5())
    assert words == ["batch"] * 7 + ["column", "", "row", "", "column+gather"]
    parallel = tp.TensorParallel(models.lenet5(), fake_group(2), words)
    assert isinstance(parallel.module, tp.BatchParallel) and parallel.batch_layers == 7
    assert [n for n, _ in parallel.module.named_parameters()] == [
        n for n, _ in models.lenet5().named_parameters()
    ]


def test_batch_words_must_start_the_plan():
    model = L.Sequential(L.Linear(4, 6), L.ReLU(), L.Linear(6, 3))
    with pytest.raises(tp.PlacementError) as error:
        tp.TensorParallel(model, fake_group(2), ["column", "", "batch"])
    assert "from the first on" in str(error.value)


def test_alexnet_2012_goes_one_column_per_rank_crossing_where_the_serial_net_needs_all_maps():
    """conv2, conv4 and conv5 (2 groups) one group per rank; conv1 and conv3 split by filters;
    gathered for each response norm, at the Flatten, and for the dropout after fc6."""
    from minidl import models

    alexnet = models.alexnet(variant="original")
    words = tp.plan(alexnet, 2)
    convs = [w for w in words if w.partition("+")[0] in ("filter", "group")]
    assert convs == ["filter+gather", "group+gather", "filter", "group", "group+gather"]
    linears = [w for w in words if w.startswith(("column", "row"))]
    assert linears == ["column+gather", "column", "row"]
    assert tp.plan(alexnet, 3).count("group") == 0


def test_a_tp_layout_without_a_tp_group_is_refused_with_the_fix():
    from minidl.dist import DistConfig, GridShape
    from minidl.train import TrainConfig
    from minidl.train.config import ConfigError

    with pytest.raises(ConfigError) as error:
        DistConfig(tp_layout="one-weird-trick", grid=GridShape(dp=2)).check(TrainConfig())
    assert "tp > 1" in str(error.value)
    with pytest.raises(ConfigError):
        DistConfig(tp_layout="two-towers").check(TrainConfig())
    from minidl.dist.compression import TopK

    with pytest.raises(ConfigError) as error:
        DistConfig(compressor=TopK(0.1), grid=GridShape(tp=2)).check(TrainConfig())
    assert "compress applies to data-parallel grids" in str(error.value)
