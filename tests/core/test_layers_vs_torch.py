"""Every layer's forward and backward against PyTorch, on random shapes, in float32.

Tolerances: float32 carries ~7 significant digits; sums over a few hundred
terms in a different order (OpenBLAS here, MKL there) differ by ~1e-6
relative, so 1e-5 relative with a 1e-5 absolute floor leaves a margin
without hiding real errors (a wrong formula is off by far more).
"""

import numpy as np
import pytest

import minidl as md
from minidl import layers as L

from ..conftest import compare_with_torch

torch = pytest.importorskip("torch")
nn = torch.nn

ATOL, RTOL = 1e-5, 1e-5


def copy_params(mine, theirs):
    """Give the torch module the minidl module's parameters and buffers."""
    state = {k: torch.tensor(np.asarray(v)) for k, v in mine.state_dict().items()}
    theirs.load_state_dict(state)


def check_layer(mine, theirs, x, train=True):
    """Same input, same parameters: equal outputs, input gradients and parameter gradients."""
    copy_params(mine, theirs)
    mine.train(train)
    theirs.train(train)
    compare_with_torch(mine, theirs, [x], atol=ATOL, rtol=RTOL)
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(
            p.grad,
            q.grad.numpy(),
            atol=ATOL,
            rtol=RTOL,
            err_msg=f"gradient of {name} differs from PyTorch",
        )
    for name, b in mine.named_buffers():
        np.testing.assert_allclose(
            np.asarray(b.data),
            theirs.state_dict()[name].numpy(),
            atol=ATOL,
            rtol=RTOL,
            err_msg=f"buffer {name} differs",
        )


def random_input(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("trial", range(3))
def test_linear(rng, trial):
    n, i, o = rng.integers(1, 9, 3)
    check_layer(L.Linear(i, o), nn.Linear(i, o), random_input(rng, (n, i)))


def test_linear_without_bias_and_3d_input(rng):
    check_layer(
        L.Linear(5, 4, bias=False), nn.Linear(5, 4, bias=False), random_input(rng, (2, 3, 5))
    )


@pytest.mark.parametrize(
    "mine,theirs", [(L.ReLU, nn.ReLU), (L.Tanh, nn.Tanh), (L.Sigmoid, nn.Sigmoid)]
)
def test_activations(rng, mine, theirs):
    check_layer(mine(), theirs(), random_input(rng, (3, 4, 5)))


@pytest.mark.parametrize(
    "kernel,stride,padding,shape",
    [
        (2, None, 0, (2, 3, 8, 8)),
        (3, 2, 1, (2, 2, 9, 7)),
        ((3, 2), (2, 1), (1, 0), (1, 3, 6, 5)),
        (3, 2, 0, (2, 4, 13, 13)),
    ],
)
def test_pooling(rng, kernel, stride, padding, shape):
    x = random_input(rng, shape)
    check_layer(L.MaxPool2d(kernel, stride, padding), nn.MaxPool2d(kernel, stride, padding), x)
    check_layer(L.AvgPool2d(kernel, stride, padding), nn.AvgPool2d(kernel, stride, padding), x)


@pytest.mark.parametrize("train", [True, False])
def test_batchnorm2d(rng, train):
    mine, theirs = L.BatchNorm2d(3), nn.BatchNorm2d(3)
    for p in (mine.weight, mine.bias, mine.running_mean):
        p.data[...] = rng.standard_normal(3)
    mine.running_var.data[...] = rng.uniform(0.5, 2, 3)
    check_layer(mine, theirs, random_input(rng, (4, 3, 5, 2)) * 3 + 1, train=train)


@pytest.mark.parametrize("shape", [(6, 4), (5, 4, 3)])
def test_batchnorm1d_training_updates_running_statistics(rng, shape):
    mine, theirs = L.BatchNorm1d(4, momentum=0.3), nn.BatchNorm1d(4, momentum=0.3)
    check_layer(mine, theirs, random_input(rng, shape) * 2 - 1, train=True)
    assert int(mine.num_batches_tracked.data) == 1


@pytest.mark.parametrize("size", [2, 3, 5])
def test_local_response_norm(rng, size):
    x = random_input(rng, (2, 7, 4, 3)) * 3
    check_layer(
        L.LocalResponseNorm(size, alpha=1e-2, beta=0.75, k=2.0),
        nn.LocalResponseNorm(size, alpha=1e-2, beta=0.75, k=2.0),
        x,
    )


@pytest.mark.parametrize("beta", [0.75, 0.6])
@pytest.mark.parametrize("layout", [(0, 1, 2, 3), (0, 2, 3, 1), (1, 2, 3, 0)])  # NCHW, NHWC, CHWN
def test_local_response_norm_in_chunks_in_every_memory_layout(rng, beta, layout):
    """Large enough to run in several cache-sized chunks; beta off the square-root path too."""
    from minidl.functional.normalization import LocalResponseNorm

    x = random_input(rng, (16, 32, 32, 32)) * 3
    x = np.ascontiguousarray(x.transpose(layout)).transpose(np.argsort(layout))
    assert len(LocalResponseNorm()._chunks(x)) > 1
    check_layer(
        L.LocalResponseNorm(5, alpha=1e-2, beta=beta, k=2.0),
        nn.LocalResponseNorm(5, alpha=1e-2, beta=beta, k=2.0),
        x,
    )


def test_flatten_and_sequential(rng):
    mine = L.Sequential(L.Flatten(), L.Linear(12, 5), L.ReLU(), L.Linear(5, 3))
    theirs = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Linear(5, 3))
    check_layer(mine, theirs, random_input(rng, (4, 3, 2, 2)))


def test_dropout_scales_survivors_and_is_identity_in_eval(rng):
    md.manual_seed(0)
    layer = L.Dropout(0.25)
    x = md.tensor(np.ones((200, 200)), requires_grad=True)
    y = layer(x).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75)
    assert abs(kept.mean() - 0.75) < 0.01
    layer(x).sum().backward()
    assert set(np.unique(x.grad)) <= {0.0, np.float32(1 / 0.75)}
    layer.eval()
    assert layer(x) is x


def test_dropout_is_reproducible_with_a_seed(rng):
    x = md.tensor(np.ones((10, 10)))
    md.manual_seed(5)
    a = md.functional.dropout(x, 0.5).numpy()
    md.manual_seed(5)
    b = md.functional.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)


def test_cross_entropy_and_mse_match_torch(rng):
    logits = random_input(rng, (6, 4))
    labels = rng.integers(0, 4, 6)
    for reduction in ("mean", "sum", "none"):
        compare_with_torch(
            lambda z: md.functional.cross_entropy(z, labels, reduction=reduction),
            lambda z: torch.nn.functional.cross_entropy(
                z, torch.tensor(labels), reduction=reduction
            ),
            [logits],
            atol=ATOL,
            rtol=RTOL,
        )
    target = random_input(rng, (6, 4))
    compare_with_torch(
        lambda p: md.functional.mse_loss(p, target),
        lambda p: torch.nn.functional.mse_loss(p, torch.tensor(target)),
        [logits],
        atol=ATOL,
        rtol=RTOL,
    )
