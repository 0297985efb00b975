"""How a dimension is split over ranks, and the refusals of layers too narrow to split."""

import types

import numpy as np
import pytest

from minidl import layers as L
from minidl.dist import tensor as tp
from minidl.dist.tensor.partition import Partition, take_block


@pytest.mark.parametrize("n, parts", [(7, 1), (7, 2), (7, 3), (7, 4), (8, 4), (4, 4)])
def test_blocks_cover_the_dimension_in_order_and_differ_by_at_most_one(n, parts):
    part = Partition(n, parts)
    assert sum(part.sizes) == n and max(part.sizes) - min(part.sizes) <= 1
    assert max(part.sizes) == part.largest
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
