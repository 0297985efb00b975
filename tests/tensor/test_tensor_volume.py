"""The communication formula of minidl.perf.tensor_volume on layers worked out by hand."""

from minidl import layers as L
from minidl.dist import tensor as tp
from minidl.perf.tensor_volume import gradient_bytes, tensor_volume


def test_an_mlp_moves_its_activations_as_the_table_says():
    # Flatten, column 36->13 (no dx: nothing upstream), row 13->11 (allreduce 11),
    # column+gather 11->10 (dx allreduce 11, all-gather the largest block ceil(10/3) = 4)
    model = L.Sequential(L.Flatten(), L.Linear(36, 13), L.Linear(13, 11), L.Linear(11, 10))
    plan = tp.plan(model)
    assert plan == ["", "column", "row", "column+gather"]
    assert tensor_volume(model, plan, (1, 6, 6), batch=5, tp=3, itemsize=8) == {
        "allreduce": 5 * (11 + 11) * 8,
        "allgather": 5 * 4 * 8,
    }
    assert tensor_volume(model, plan, (1, 6, 6), batch=5, tp=1) == {"allreduce": 0, "allgather": 0}


def test_a_conv_pair_moves_the_output_maps_and_a_whole_input_is_gathered_backward():
    # filter 3->5 on 8x8 (first: no dx), input 5->4 on 8x8 -> 6x6: allreduce 4*6*6;
    # then row 144->7 on a whole input: allreduce 7 forward, all-gather ceil(144/2) backward
    model = L.Sequential(L.Conv2d(3, 5, 3, padding=1), L.Conv2d(5, 4, 3), L.Flatten())
    model = L.Sequential(*model, L.Linear(144, 7))
    plan = ["filter", "input", "", "row"]
    assert tensor_volume(model, plan, (3, 8, 8), batch=2, tp=2) == {
        "allreduce": 2 * (4 * 6 * 6 + 7) * 4,
        "allgather": 2 * 72 * 4,
    }


def test_each_rank_reduces_its_own_blocks_and_the_whole_replicated_biases():
    model = L.Sequential(L.Linear(4, 7), L.Linear(7, 3))
    plan = ["column", "row"]
    # rank 0: 3 of 7 rows of W1 (3*4) and of b1 (3), 3 of 7 columns of W2 (3*3), all of b2 (3)
    assert gradient_bytes(model, plan, tp=3, rank=0) == (12 + 3 + 9 + 3) * 4
    assert gradient_bytes(model, plan, tp=3, rank=2) == (8 + 2 + 6 + 3) * 4


def test_predict_ranks_the_grids_that_fit_by_their_predicted_step():
    import types

    from minidl import models
    from minidl.dist.tensor.placement import split_widths
    from minidl.perf.grid_predict import rank_grids
    from minidl.perf.network import Network

    model = models.lenet5()
    compute = types.SimpleNamespace(step_time=lambda b: types.SimpleNamespace(total_s=b * 1e-3))
    slow = Network(latency_s=1e-3, bandwidth=1e6)
    plan = tp.plan(model)
    narrowest = min(width for width, _, _ in split_widths(model, plan))
    points = rank_grids(model, (1, 28, 28), plan, narrowest, 8, 64, compute, slow)
    # tp=8 is wider than conv1's 6 filters: left out; tp=1, 2, 4 remain
    assert sorted(p.grid for p in points) == ["dp=2,tp=4", "dp=4,tp=2", "dp=8,tp=1"]
    assert [p.step_s for p in points] == sorted(p.step_s for p in points)
    by_grid = {p.grid: p for p in points}
    assert by_grid["dp=4,tp=2"].tp_bytes == sum(
        tensor_volume(model, plan, (1, 28, 28), 16, 2).values()
    )
    assert by_grid["dp=4,tp=2"].dp_bytes == gradient_bytes(model, plan, 2, 0)
    assert by_grid["dp=8,tp=1"].tp_bytes == 0
    free = Network(latency_s=0.0, bandwidth=float("inf"))
    for p in rank_grids(model, (1, 28, 28), plan, narrowest, 8, 64, compute, free):
        assert p.comm_s == 0 and p.compute_s == p.local_batch * 1e-3 / int(p.grid[-1])


def test_minidl_predict_grids_prints_every_grid_that_fits(capsys):
    from minidl_app.cli import main

    assert main(["predict", "--model", "lenet5", "--grids", "4", "--compute", "roofline"]) == 0
    out = capsys.readouterr().out
    assert "on 4 ranks" in out
    assert all(grid in out for grid in ("dp=4,tp=1", "dp=2,tp=2", "dp=1,tp=4"))


def test_one_weird_trick_sums_the_conv_gradients_and_gathers_the_batch_once():
    # conv 1->2 3x3 on 6x6 (20 weights), Flatten (72 per sample), then column+gather 72->5:
    # allreduce 20 weights + dx of the gathered batch (8 x 72); all-gather ceil(8/3) x 72 and
    # the column's output block ceil(5/3) x 8
    model = L.Sequential(L.Conv2d(1, 2, 3, padding=1), L.Flatten(), L.Linear(72, 5))
    plan = tp.one_weird_trick_plan(model)
    assert plan == ["batch", "batch", "column+gather"]
    assert tensor_volume(model, plan, (1, 6, 6), batch=8, tp=3) == {
        "allreduce": (20 + 8 * 72) * 4,
        "allgather": (3 * 72 + 8 * 2) * 4,
    }
