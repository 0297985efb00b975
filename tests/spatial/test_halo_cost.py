"""The halo formula against counting the rows each rank's windows read; refusals of bad splits."""

import pytest

import minidl as md
from minidl import layers as L
from minidl.conv.geometry import output_size
from minidl.dist.spatial import SplitError, plan_rows
from minidl.perf.halo_cost import halo_bytes, halo_rows, split_rows

CASES = (  # (height, kernel, stride, padding, dilation, parts)
    (28, 5, 1, 2, 1, 2),
    (28, 5, 1, 2, 1, 3),
    (28, 2, 2, 0, 1, 3),
    (14, 5, 1, 0, 1, 4),
    (227, 11, 4, 0, 1, 4),
    (224, 11, 4, 2, 1, 3),
    (55, 3, 2, 0, 1, 4),
    (19, 3, 1, 2, 2, 4),
    (17, 3, 2, 1, 1, 3),
)


def counted_rows(height, kernel, stride, padding, dilation, parts):
    """Rows crossing each boundary, by listing every input row each rank's outputs read."""
    rows = split_rows(height, parts)
    outs = split_rows(output_size(height, kernel, stride, padding, dilation), parts)
    owner = {i: r for r, (a, b) in enumerate(rows) for i in range(a, b)}
    moved = {(r, s): 0 for r in range(parts) for s in range(parts)}  # (from, to): rows
    for rank, (first, stop) in enumerate(outs):
        read = {
            o * stride - padding + t * dilation for o in range(first, stop) for t in range(kernel)
        }
        for i in read:
            if 0 <= i < height and owner[i] != rank:
                moved[owner[i], rank] += 1
    assert all(n == 0 for (a, b), n in moved.items() if abs(a - b) > 1)
    return [(moved[r - 1, r], moved[r, r - 1]) for r in range(1, parts)]


@pytest.mark.parametrize("case", CASES)
def test_halo_rows_equal_the_rows_the_windows_read(case):
    assert halo_rows(*case) == counted_rows(*case)


def test_halo_bytes_count_rows_times_a_row_each_way():
    rows = sum(map(sum, halo_rows(28, 5, 1, 2, 1, 4)))
    assert rows == 12  # 3 boundaries, 2 rows each way
    assert halo_bytes((8, 6, 28, 28), 5, 1, 2, 1, 4, itemsize=4) == 2 * 4 * 8 * 6 * 28 * 12
    assert halo_bytes((8, 6, 28, 28), 5, 1, 2, 1, 4, 4, input_grad=False) == 4 * 8 * 6 * 28 * 12


def test_one_rank_moves_nothing_and_a_window_beyond_a_neighbour_is_refused():
    assert halo_rows(28, 5, 1, 2, 1, 1) == []
    with pytest.raises(SplitError, match="reaches past the adjacent rank"):
        halo_rows(14, 5, 1, 0, 1, 5)  # 10 outputs, 2-3 rows each: a 5-row window spans 2 ranks
    with pytest.raises(SplitError, match="at most 10 ranks fit"):
        halo_rows(14, 5, 1, 0, 1, 11)


def test_a_model_that_cannot_be_split_is_refused_naming_the_layer_and_what_fits():
    with pytest.raises(SplitError) as error:
        plan_rows(md.models.lenet5(), 28, 8)
    message = str(error.value)
    assert "layer 3 (Conv2d(6, 16" in message and message.endswith("; 4 blocks would fit")
    assert "; a height of 50 would split into 8;" in message  # the smallest crop that fits
    plan_rows(md.models.lenet5(), 50, 8)
    assert "\n" not in message
    with pytest.raises(
        SplitError, match="layer 1 .*Dropout.* drawn per block.*only the whole image"
    ):
        plan_rows(L.Sequential(L.Conv2d(1, 2, 3), L.Dropout(0.5), L.Flatten()), 8, 2)
    normed = L.Sequential(L.Conv2d(1, 2, 3), L.BatchNorm2d(2), L.ReLU(), L.Flatten())
    assert plan_rows(normed, 8, 2)[1] == 3  # batch norm joins its blocks: the tail is Flatten
    with pytest.raises(SplitError, match="width 28 into 8 blocks: layer 3"):
        plan_rows(md.models.lenet5(), 28, 8, axis=1)
    with pytest.raises(SplitError, match="splits an L.Sequential"):
        plan_rows(L.Conv2d(1, 2, 3), 8, 2)


def test_the_plan_splits_lenet5_up_to_the_flatten():
    windows, gather_at, tail_height = plan_rows(md.models.lenet5(), 28, 4)
    assert windows == [("0", 28), ("1", 28), ("3", 14), ("4", 10)]
    assert (gather_at, tail_height) == (6, 5)
    alexnet = md.models.alexnet(10, "small", in_channels=1)
    windows, gather_at, tail_height = plan_rows(alexnet, 28, 3)
    assert isinstance(alexnet[gather_at], L.Flatten) and tail_height == 3
    assert len(windows) == 8  # five convolutions, three poolings
    with pytest.raises(
        SplitError, match="3 output rows, fewer than the 4 ranks.*3 blocks would fit"
    ):
        plan_rows(alexnet, 28, 4)


class NoMessages:
    """A stand-in group of 4 ranks: any collective on it would fail the test."""

    size, rank = 4, 0

    def __getattr__(self, name):
        raise AssertionError(f"a refused split must not communicate (called {name})")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"cols": 3}, "cols=3 must be a whole number that divides the spatial group's 4 ranks"),
        ({"cols": 2}, "cols=2 splits the width: pass width="),
        ({"cols": 4, "width": 12}, "width 12 into 4 blocks: layer 3"),
    ],
)
def test_bad_block_splits_are_refused_before_any_message(kwargs, words):
    from minidl.dist.spatial import spatial_parallel

    with pytest.raises(SplitError, match=words):
        spatial_parallel(md.models.lenet5(), NoMessages(), 28, **kwargs)
