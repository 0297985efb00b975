"""Activation recomputation: ``md.checkpoint`` and ``L.Recompute`` give the plain model's
output, gradients, random draws and buffers, and hold fewer bytes between forward and
backward (Chen et al. 2016)."""

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import random as md_random
from minidl.exercises.checks.recompute import chain  # conv, BN, dropout: every kind of state
from minidl.perf.graph_memory import graph_bytes


def step(model, x, y, keys=None):
    """One forward and backward from seed 7: the loss, the parameters' and the input's
    gradients, the buffers, and the next numbers of the random stream."""
    md.manual_seed(7)
    md_random.set_sample_keys(keys)
    x = md.tensor(x, dtype="float64", requires_grad=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    md_random.set_sample_keys(None)
    return {
        "loss": np.array(loss.item()),
        "grads": [p.grad for p in model.parameters()],
        "input": x.grad,
        "buffers": [b.data.copy() for _, b in model.named_buffers()],
        "after": md_random.get_rng().random(4),
    }


def assert_same_step(got, expected, tol=1e-12):
    for key in ("loss", "input", "after"):
        np.testing.assert_allclose(got[key], expected[key], rtol=0, atol=tol, err_msg=key)
    for key in ("grads", "buffers"):
        for i, (a, b) in enumerate(zip(got[key], expected[key], strict=True)):
            np.testing.assert_allclose(a, b, rtol=0, atol=tol, err_msg=f"{key}[{i}]")


@pytest.fixture
def batch(rng):
    return rng.standard_normal((8, 2, 6, 6)), rng.integers(0, 5, 8)


@pytest.mark.parametrize("segments", [1, 2, 3, 10])
def test_recomputed_segments_give_the_plain_gradients_draws_and_buffers(batch, segments):
    x, y = batch
    plain = step(chain(), x, y)
    recomputed = step(L.Recompute(chain(), segments), x, y)
    assert_same_step(recomputed, plain)


def test_keyed_dropout_draws_the_same_masks_again(batch):
    """With per-sample keys (``random.set_sample_keys``) the recomputed forward draws each
    sample's stream from the same draw number as the first."""
    x, y = batch
    keys = [(0, 1, i) for i in range(len(y))]
    plain = step(chain(), x, y, keys)
    assert_same_step(step(L.Recompute(chain(), 3), x, y, keys), plain)
    assert not np.allclose(plain["loss"], step(chain(), x, y)["loss"])


def test_batch_norm_counts_and_updates_its_statistics_once(batch):
    x, y = batch
    model = L.Recompute(chain(), 2)
    step(model, x, y)
    for norm in (model[1], model[6]):
        assert int(norm.num_batches_tracked.data) == 1


def test_checkpoint_of_a_function_differentiates_what_it_closes_over(rng):
    """Any tensor ``fn`` uses that requires grad gets its gradient, not only the inputs."""
    w, a, b = (
        md.tensor(rng.standard_normal(shape), dtype="float64", requires_grad=True)
        for shape in ((3, 3), (4, 3), (4, 3))
    )

    def fn(u, v):
        return ((u @ w).tanh() * v).sum(axis=1)

    fn(a, b).sum().backward()
    plain = [t.grad for t in (w, a, b)]
    for t in (w, a, b):
        t.grad = None
    md.checkpoint(fn, a, b).sum().backward()
    for got, want in zip((w.grad, a.grad, b.grad), plain):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


def test_checkpoint_links_a_node_only_where_a_gradient_can_flow(rng):
    x = md.tensor(rng.standard_normal((2, 3)), dtype="float64")
    w = md.tensor(rng.standard_normal((3, 3)), dtype="float64", requires_grad=True)
    assert not md.checkpoint(lambda u: u * 2, x).requires_grad  # nothing requires grad
    assert md.checkpoint(lambda u: u @ w, x).requires_grad  # the closure's w does
    with md.no_grad():
        assert md.checkpoint(lambda u: u @ w, x)._ctx is None


def test_nested_checkpoints_and_each_parameter_hook_once_per_backward(batch):
    x, y = batch
    plain = step(chain(), x, y)
    model = chain()
    inner = L.Recompute(L.Sequential(*list(model)[5:]), 2)
    nested = L.Recompute(L.Sequential(*list(model)[:5], inner), 2)
    calls = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: calls.append(id(p)))
    got = step(nested, x, y)
    assert_same_step(got, plain)
    assert sorted(calls) == sorted(id(p) for p in model.parameters())


def test_recompute_keeps_the_sequential_names_so_state_files_load_both_ways(tmp_path):
    plain, recomputed = md.models.lenet5(), L.Recompute(md.models.lenet5(), 3)
    assert list(plain.state_dict()) == list(recomputed.state_dict())
    path = tmp_path / "state.npz"
    np.savez(path, **{k: md.backend.to_numpy(v) for k, v in recomputed.state_dict().items()})
    plain.load_state_dict(dict(np.load(path)))
    recomputed.load_state_dict(plain.state_dict())
    assert recomputed.bounds == ((0, 4), (4, 8), (8, 12))
    assert recomputed.within(3, 9) == ((0, 1), (1, 5), (5, 6))


def test_recompute_refuses_what_it_cannot_cut():
    with pytest.raises(ValueError, match="13 segments of a Sequential of 12 layers; choose 1 to"):
        L.Recompute(md.models.lenet5(), 13)
    with pytest.raises(ValueError, match="choose 1 to 12"):
        L.Recompute(md.models.lenet5(), 0)
    with pytest.raises(TypeError, match="not a Recompute, whose forward does more"):
        L.Recompute(L.Recompute(md.models.lenet5(), 2), 2)
    with pytest.raises(TypeError, match="input 0 is a ndarray"):
        md.checkpoint(lambda u: u, np.zeros(2))


@pytest.mark.parametrize("name", ["lenet5", "alexnet-small"])
def test_sqrt_segments_hold_at_most_half_the_activation_bytes(name):
    """The arrays the graph keeps between forward and backward, N = round(sqrt(L))."""
    held = {}
    for segments in (None, "sqrt"):
        md.manual_seed(0)
        model = md.models.build(name).to("float64")
        if segments:
            model = L.Recompute(model, L.sqrt_segments(len(model)))
        x = md.tensor(np.random.default_rng(0).standard_normal((16, 1, 28, 28)), dtype="float64")
        held[segments] = graph_bytes(F.cross_entropy(model(x), np.zeros(16, dtype=np.int64)))
    assert held["sqrt"] <= held[None] / 2, held


def test_graph_bytes_counts_each_array_once_and_leaves_out_the_leaves():
    w = md.tensor(np.ones((4, 4)), requires_grad=True, dtype="float64")
    h = w * w  # keeps w twice: a leaf, not counted
    loss = (h.reshape(16) * 3.0).sum()  # the view of h and h: 128 bytes; the product: 128
    assert graph_bytes(loss) == 256
