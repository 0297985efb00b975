"""The reference layer formulas (minidl.reference.functional) against float64 central
differences (md.gradcheck), the tuned minidl.functional ops and PyTorch."""

import numpy as np
import pytest

import minidl as md
from minidl import backend
from minidl import functional as F
from minidl.reference.functional import dropout
from minidl.reference.functional import tensor_ops as R

from ..conftest import compare_with_torch

LABELS = np.array([0, 4, 2, 4, 1])


# (id, reference op on Tensors, tuned op on Tensors, input shapes)
CASES = [
    ("linear", R.linear, F.linear, [(4, 3), (5, 3), (5,)]),
    ("linear_no_bias", R.linear, F.linear, [(4, 3), (5, 3)]),
    ("relu", R.relu, F.relu, [(3, 4)]),
    ("sigmoid", R.sigmoid, F.sigmoid, [(3, 4)]),
    ("tanh", R.tanh, F.tanh, [(3, 4)]),
    (
        "softmax_cross_entropy",
        lambda z: R.softmax_cross_entropy(z, labels=LABELS),
        lambda z: F.cross_entropy(z, LABELS),
        [(5, 5)],
    ),
    (
        "max_pool_2x2",
        lambda x: R.max_pool(x, kernel_size=2),
        lambda x: F.max_pool2d(x, 2),
        [(2, 3, 6, 6)],
    ),
    (
        "max_pool_overlap_pad",
        lambda x: R.max_pool(x, kernel_size=3, stride=2, padding=1),
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
        [(2, 2, 7, 6)],
    ),
    (
        "max_pool_rect",
        lambda x: R.max_pool(x, kernel_size=(2, 3), stride=(1, 2)),
        lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2)),
        [(1, 2, 5, 7)],
    ),
    (
        "avg_pool_overlap_pad",
        lambda x: R.avg_pool(x, kernel_size=3, stride=2, padding=1),
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
        [(2, 2, 7, 6)],
    ),
    (
        "avg_pool_2x2",
        lambda x: R.avg_pool(x, kernel_size=2),
        lambda x: F.avg_pool2d(x, 2),
        [(2, 3, 4, 6)],
    ),
    (
        "batch_norm_train_nchw",
        lambda x, g, b: R.batch_norm(x, g, b, training=True),
        lambda x, g, b: F.batch_norm(x, weight=g, bias=b, training=True),
        [(4, 3, 3, 2), (3,), (3,)],
    ),
    (
        "batch_norm_train_nc",
        lambda x, g, b: R.batch_norm(x, g, b, training=True),
        lambda x, g, b: F.batch_norm(x, weight=g, bias=b, training=True),
        [(5, 4), (4,), (4,)],
    ),
    (
        "lrn_odd",
        lambda x: R.lrn(x, size=5, alpha=0.5, beta=0.6, k=2.0),
        lambda x: F.local_response_norm(x, 5, alpha=0.5, beta=0.6, k=2.0),
        [(2, 7, 2, 3)],
    ),
    (
        "lrn_even",
        lambda x: R.lrn(x, size=4, alpha=0.3, beta=0.75, k=1.5),
        lambda x: F.local_response_norm(x, 4, alpha=0.3, beta=0.75, k=1.5),
        [(2, 6, 3, 3)],
    ),
    (
        "lrn_alexnet",
        lambda x: R.lrn(x, size=5, alpha=5e-4, beta=0.75, k=2.0),
        lambda x: F.local_response_norm(x, 5, alpha=5e-4, beta=0.75, k=2.0),
        [(1, 8, 2, 2)],
    ),
]
IDS = [c[0] for c in CASES]


def make_inputs(shapes, rng, dtype="float64", device="cpu"):
    return [
        md.tensor(rng.standard_normal(s), requires_grad=True, dtype=dtype, device=device)
        for s in shapes
    ]


@pytest.mark.parametrize("ref,shapes", [(c[1], c[3]) for c in CASES], ids=IDS)
def test_reference_gradient_matches_central_differences(ref, shapes, rng):
    assert md.gradcheck(ref, *make_inputs(shapes, rng))


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-10), ("float32", 2e-5)])
@pytest.mark.parametrize("ref,tuned,shapes", [c[1:] for c in CASES], ids=IDS)
def test_reference_matches_the_tuned_op(ref, tuned, shapes, dtype, tol, rng, device):
    mine = make_inputs(shapes, rng, dtype, device)
    theirs = [md.tensor(t.data, requires_grad=True, dtype=dtype, device=device) for t in mine]
    out, expected = ref(*mine), tuned(*theirs)
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=tol, atol=tol)
    g = md.tensor(rng.standard_normal(out.shape), dtype=dtype, device=device)
    out.backward(g)
    expected.backward(g)
    for i, (a, b) in enumerate(zip(mine, theirs)):
        assert a.grad.dtype == b.grad.dtype
        np.testing.assert_allclose(
            backend.to_numpy(a.grad),
            backend.to_numpy(b.grad),
            rtol=tol,
            atol=tol,
            err_msg=f"gradient of input {i} differs",
        )


# (id, reference op, the same op in PyTorch as a function of torch.nn.functional and the
# inputs, shapes)
TORCH_CASES = [
    ("linear", R.linear, lambda tf, x, w, b: tf.linear(x, w, b), [(4, 3), (5, 3), (5,)]),
    ("relu", R.relu, lambda tf, x: tf.relu(x), [(3, 4)]),
    ("sigmoid", R.sigmoid, lambda tf, x: x.sigmoid(), [(3, 4)]),
    ("tanh", R.tanh, lambda tf, x: x.tanh(), [(3, 4)]),
    (
        "softmax_cross_entropy",
        lambda z: R.softmax_cross_entropy(z, labels=LABELS),
        lambda tf, z: tf.cross_entropy(z, z.new_tensor(LABELS).long()),
        [(5, 5)],
    ),
    (
        "max_pool_overlap_pad",
        lambda x: R.max_pool(x, kernel_size=3, stride=2, padding=1),
        lambda tf, x: tf.max_pool2d(x, 3, stride=2, padding=1),
        [(2, 2, 7, 6)],
    ),
    (
        "avg_pool_overlap_pad",
        lambda x: R.avg_pool(x, kernel_size=3, stride=2, padding=1),
        lambda tf, x: tf.avg_pool2d(x, 3, stride=2, padding=1),
        [(2, 2, 7, 6)],
    ),
    (
        "batch_norm_train",
        lambda x, g, b: R.batch_norm(x, g, b, training=True),
        lambda tf, x, g, b: tf.batch_norm(x, None, None, g, b, training=True),
        [(4, 3, 3, 2), (3,), (3,)],
    ),
    (
        "lrn_even",
        lambda x: R.lrn(x, size=4, alpha=0.3, beta=0.75, k=1.5),
        lambda tf, x: tf.local_response_norm(x, 4, alpha=0.3, beta=0.75, k=1.5),
        [(2, 6, 3, 3)],
    ),
    (
        "lrn_odd",
        lambda x: R.lrn(x, size=5, alpha=0.5, beta=0.6, k=2.0),
        lambda tf, x: tf.local_response_norm(x, 5, alpha=0.5, beta=0.6, k=2.0),
        [(2, 7, 2, 3)],
    ),
]


@pytest.mark.parametrize(
    "ref,theirs,shapes", [c[1:] for c in TORCH_CASES], ids=[c[0] for c in TORCH_CASES]
)
def test_reference_matches_torch(ref, theirs, shapes, rng):
    tf = pytest.importorskip("torch").nn.functional
    arrays = [rng.standard_normal(s) for s in shapes]
    compare_with_torch(ref, lambda *t: theirs(tf, *t), arrays, atol=1e-10, rtol=1e-10)


def test_max_pool_ties_send_the_gradient_to_the_first_maximum(rng):
    """A constant input: every 2x2 window is a tie, so only its top-left element gets gradient."""
    x = md.tensor(np.ones((1, 2, 4, 4)), requires_grad=True, dtype="float64")
    g = rng.standard_normal((1, 2, 2, 2))
    R.max_pool(x, kernel_size=2).backward(md.tensor(g, dtype="float64"))
    expected = np.zeros((1, 2, 4, 4))
    expected[:, :, ::2, ::2] = g
    np.testing.assert_array_equal(x.grad, expected)


def test_max_pool_ties_agree_with_the_tuned_op_and_torch(rng):
    """Overlapping windows over a few distinct values: many ties, resolved the same way by
    all three."""
    torch = pytest.importorskip("torch")
    x = rng.integers(0, 3, (2, 3, 7, 7)).astype(np.float64)
    g = rng.standard_normal((2, 3, 4, 4))
    grads = []
    for op in (
        lambda t: R.max_pool(t, kernel_size=3, stride=2, padding=1),
        lambda t: F.max_pool2d(t, 3, stride=2, padding=1),
    ):
        t = md.tensor(x, requires_grad=True, dtype="float64")
        op(t).backward(md.tensor(g, dtype="float64"))
        grads.append(t.grad)
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_pool2d(xt, 3, stride=2, padding=1).backward(torch.tensor(g))
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_array_equal(grads[0], xt.grad.numpy())


def test_batch_norm_training_updates_running_statistics_like_the_tuned_op_and_torch(rng):
    torch = pytest.importorskip("torch")
    x, g, b = (
        rng.standard_normal((6, 3, 2, 2)) * 2 + 1,
        rng.standard_normal(3),
        rng.standard_normal(3),
    )
    mean, var = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    stats = {"ref": (mean.copy(), var.copy()), "tuned": (mean.copy(), var.copy())}
    as_tensors = [md.tensor(a, requires_grad=True, dtype="float64") for a in (x, g, b)]
    R.batch_norm(
        *as_tensors,
        running_mean=stats["ref"][0],
        running_var=stats["ref"][1],
        training=True,
        momentum=0.2,
    )
    F.batch_norm(
        as_tensors[0],
        *stats["tuned"],
        weight=as_tensors[1],
        bias=as_tensors[2],
        training=True,
        momentum=0.2,
    )
    rm, rv = torch.tensor(mean), torch.tensor(var)
    torch.nn.functional.batch_norm(
        torch.tensor(x), rm, rv, torch.tensor(g), torch.tensor(b), training=True, momentum=0.2
    )
    for a, c, t in zip(stats["ref"], stats["tuned"], (rm.numpy(), rv.numpy())):
        np.testing.assert_allclose(a, c, rtol=1e-12)
        np.testing.assert_allclose(a, t, rtol=1e-12)


def test_batch_norm_eval_uses_the_running_statistics(rng):
    x, g, b = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal(3)
    mean, var = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    kept = mean.copy(), var.copy()
    tensors = [md.tensor(a, requires_grad=True, dtype="float64") for a in (x, g, b)]

    def eval_bn(*t):
        return R.batch_norm(*t, running_mean=mean, running_var=var, training=False)

    y = eval_bn(*tensors)
    np.testing.assert_allclose(y.numpy(), g * (x - mean) / np.sqrt(var + 1e-5) + b, rtol=1e-12)
    np.testing.assert_array_equal(mean, kept[0])
    np.testing.assert_array_equal(var, kept[1])
    assert md.gradcheck(eval_bn, *tensors)
    dout = rng.standard_normal((4, 3))
    y.backward(md.tensor(dout, dtype="float64"))
    np.testing.assert_allclose(tensors[0].grad, dout * g / np.sqrt(var + 1e-5), rtol=1e-12)


def test_batch_norm_eval_without_running_statistics_is_an_error(rng):
    x = rng.standard_normal((4, 3))
    with pytest.raises(ValueError, match="running_mean"):
        R.batch_norm(*(md.tensor(a) for a in (x, np.ones(3), np.zeros(3))), training=False)


def test_dropout_draws_the_tuned_op_s_mask_from_the_same_seed(rng):
    x = rng.standard_normal((6, 7)).astype(np.float32)
    md.manual_seed(5)
    tuned = F.dropout(md.tensor(x), 0.3, training=True).numpy()
    y, mask = dropout.dropout_forward(x, 0.3, np.random.default_rng(5))
    assert y.dtype == mask.dtype == np.float32
    np.testing.assert_array_equal(y, tuned)
    assert set(np.unique(mask)) <= {0.0, np.float32(1 / 0.7)}
    dout = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(dropout.dropout_backward(dout, mask), dout * mask)


def test_dropout_keeps_the_expected_fraction_and_is_the_identity_in_evaluation(rng):
    x = np.ones((200, 100))
    y, mask = dropout.dropout_forward(x, 0.25, np.random.default_rng(0))
    assert abs((mask > 0).mean() - 0.75) < 0.01  # 20000 draws: std 0.003
    assert abs(y.mean() - 1.0) < 0.02
    y, mask = dropout.dropout_forward(x, 0.25, np.random.default_rng(0), training=False)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(mask, np.ones_like(x))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        dropout.dropout_forward(x, 1.0, np.random.default_rng(0))


def small_model(ops, x, params, stats, labels):
    """LRN -> 2x2 max pool -> flatten -> batch norm -> linear -> ReLU -> linear -> cross-entropy."""
    lrn, pool, bn, linear, relu, loss = ops
    gamma, beta, w1, b1, w2, b2 = params
    h = F.flatten(pool(lrn(x)))
    h = relu(linear(bn(h, gamma, beta, *stats), w1, b1))
    return loss(linear(h, w2, b2), labels)


REFERENCE_OPS = (
    lambda x: R.lrn(x, size=3, alpha=0.3, beta=0.75, k=2.0),
    lambda x: R.max_pool(x, kernel_size=2),
    lambda x, g, b, m, v: R.batch_norm(x, g, b, running_mean=m, running_var=v, training=True),
    R.linear,
    R.relu,
    lambda z, y: R.softmax_cross_entropy(z, labels=y),
)
TUNED_OPS = (
    lambda x: F.local_response_norm(x, 3, alpha=0.3, beta=0.75, k=2.0),
    lambda x: F.max_pool2d(x, 2),
    lambda x, g, b, m, v: F.batch_norm(x, m, v, weight=g, bias=b, training=True),
    F.linear,
    F.relu,
    F.cross_entropy,
)


def test_a_small_model_on_reference_ops_matches_the_tuned_ops(rng, device):
    xp = backend.xp_for(device)
    x = rng.standard_normal((6, 4, 4, 4))
    labels = xp.asarray(rng.integers(0, 3, 6))
    shapes = [(16,), (16,), (8, 16), (8,), (3, 8), (3,)]
    arrays = [rng.standard_normal(s) for s in shapes]
    runs = []
    for ops in (REFERENCE_OPS, TUNED_OPS):
        params = [md.tensor(a, requires_grad=True, dtype="float64", device=device) for a in arrays]
        xt = md.tensor(x, requires_grad=True, dtype="float64", device=device)
        stats = (xp.zeros(16), xp.ones(16))
        loss = small_model(ops, xt, params, stats, labels)
        loss.backward()
        runs.append(
            (
                loss.item(),
                [backend.to_numpy(t.grad) for t in [xt] + params],
                [backend.to_numpy(s) for s in stats],
            )
        )
    (loss_ref, grads_ref, stats_ref), (loss_tuned, grads_tuned, stats_tuned) = runs
    assert loss_ref == pytest.approx(loss_tuned, rel=1e-12)
    for i, (a, b) in enumerate(zip(grads_ref, grads_tuned)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=f"gradient {i} differs")
    for a, b in zip(stats_ref, stats_tuned):
        np.testing.assert_allclose(a, b, rtol=1e-12)
