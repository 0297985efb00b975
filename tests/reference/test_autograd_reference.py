"""The reference autograd (minidl.reference.autograd.Value) against float64 central differences
and against minidl's tuned autograd engine on the same expressions."""

import numpy as np
import pytest

import minidl as md
from minidl import backend
from minidl import functional as F
from minidl.gradcheck import _central_differences
from minidl.reference.autograd import Value, topological_order

from ..core.test_gradcheck_ops import make_inputs, positive

# (id, expression written once for Values and Tensors, input shapes)
CASES = [
    ("add_broadcast", lambda a, b: a + b, [(3, 1, 4), (5, 1)]),
    ("sub_broadcast", lambda a, b: a - b, [(4,), (2, 3, 4)]),
    ("mul_broadcast", lambda a, b: a * b, [(2, 3, 4), (3, 1)]),
    ("mul_scalar_operand", lambda a, b: a * b, [(3, 4), ()]),
    ("numbers_on_either_side", lambda a: 3 - 2 * a + 1 - a * 0.5, [(2, 3)]),
    ("neg", lambda a: -a, [(2, 3)]),
    ("matmul", lambda a, b: a @ b, [(3, 4), (4, 5)]),
    ("sum_all", lambda a: a.sum(), [(3, 4)]),
    ("sum_axes", lambda a: a.sum(axis=(0, 2)), [(2, 3, 4)]),
    ("sum_negative_axis_keepdims", lambda a: a.sum(axis=-1, keepdims=True), [(2, 3, 4)]),
    ("mean_axis", lambda a: a.mean(axis=1), [(2, 3, 4)]),
    ("mean_all", lambda a: a.mean(), [(3, 4)]),
    ("relu", lambda a: a.relu(), [(3, 4)]),
    ("exp", lambda a: a.exp(), [(3, 4)]),
    ("log", lambda a: a.log(), [positive((3, 4))]),
    (
        "shared_subexpressions",
        lambda a, b: ((a * b).relu() * (a * b) + (a - b).exp()).sum(axis=0),
        [(3, 4), (3, 4)],
    ),
    ("mlp_layer", lambda x, w, b: (x @ w + b).relu().mean(), [(5, 3), (3, 4), (4,)]),
]


def make_arrays(shapes, rng):
    """Random float64 arrays of ``shapes`` (``positive(shape)``: in [0.5, 2))."""
    return [t.numpy() for t in make_inputs(shapes, rng)]


def reference_gradients(fn, arrays, v):
    """Output and input gradients of sum(v * fn(...)) by the reference autograd."""
    values = [Value(a) for a in arrays]
    out = fn(*values)
    (out * Value(v)).sum().backward()
    return out.data, [x.grad for x in values]


@pytest.mark.parametrize("fn,shapes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_value_gradients_match_central_differences(fn, shapes, rng):
    arrays = make_arrays(shapes, rng)
    v = rng.standard_normal(np.shape(fn(*[Value(a) for a in arrays]).data))
    _, grads = reference_gradients(fn, arrays, v)
    for i, (a, g) in enumerate(zip(arrays, grads)):

        def objective():
            return float((fn(*[Value(x) for x in arrays]).data * v).sum())

        numerical = _central_differences(objective, a, 1e-6)
        assert g.shape == a.shape, f"gradient of input {i} has shape {g.shape}, not {a.shape}"
        np.testing.assert_allclose(
            g,
            numerical,
            rtol=1e-6,
            atol=1e-8,
            err_msg=f"gradient of input {i} differs from central differences",
        )


@pytest.mark.parametrize("fn,shapes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_value_matches_minidl_autograd(fn, shapes, rng):
    arrays = make_arrays(shapes, rng)
    tensors = [md.tensor(a, requires_grad=True, dtype="float64") for a in arrays]
    out = fn(*tensors)
    v = rng.standard_normal(out.shape)
    out.backward(md.tensor(v, dtype="float64"))
    data, grads = reference_gradients(fn, arrays, v)
    np.testing.assert_allclose(data, out.numpy(), rtol=1e-12, atol=1e-14)
    for i, (t, g) in enumerate(zip(tensors, grads)):
        np.testing.assert_allclose(
            g,
            t.grad,
            rtol=1e-10,
            atol=1e-12,
            err_msg=f"gradient of input {i} differs from minidl.autograd",
        )


def test_topological_order_lists_each_value_once_after_its_parents():
    a, b = Value(np.ones(2)), Value(np.full(2, 2.0))
    h = a * b
    loss = (h + h * a).sum()
    order = topological_order(loss)
    assert len(order) == len({id(v) for v in order}) == 6  # a, b, h, h*a, h + h*a, sum
    position = {id(v): k for k, v in enumerate(order)}
    assert all(position[id(p)] < position[id(v)] for v in order for p in v.parents)
    assert order[-1] is loss


def test_a_value_used_twice_gets_both_contributions():
    x = Value(np.array([3.0, -1.0]))
    (x * x + x).sum().backward()  # d/dx (x^2 + x) = 2x + 1
    np.testing.assert_array_equal(x.grad, [7.0, -1.0])


def reference_mlp_loss(x, onehot, w1, b1, w2, b2):
    """Mean softmax cross-entropy of a two-layer ReLU network, from Value ops alone.

    Subtracting the row maximum (a constant) leaves log-softmax and its gradient unchanged.
    """
    z = (x @ w1 + b1).relu() @ w2 + b2
    shifted = z - z.data.max(axis=1, keepdims=True)
    log_p = shifted - shifted.exp().sum(axis=1, keepdims=True).log()
    return -(log_p * onehot).sum(axis=1).mean()


def test_reference_mlp_trains_like_minidl(rng, device):
    """Same MLP, same data: equal losses and gradients, and equal weights after SGD steps."""
    xp = backend.xp_for(device)
    x, labels = rng.standard_normal((8, 5)), rng.integers(0, 3, 8)
    shapes = [(5, 6), (6,), (6, 3), (3,)]
    params = [0.5 * rng.standard_normal(s) for s in shapes]
    tensors = [md.tensor(p, requires_grad=True, dtype="float64", device=device) for p in params]
    values = [Value(xp.asarray(p)) for p in params]
    onehot = Value(xp.asarray(np.eye(3)[labels]))
    xt, xv = md.tensor(x, dtype="float64", device=device), Value(xp.asarray(x))
    lr, losses = 0.5, []
    for _ in range(4):
        w1, b1, w2, b2 = tensors
        loss = F.cross_entropy(F.linear(F.relu(F.linear(xt, w1.T, b1)), w2.T, b2), labels)
        loss.backward()
        ref = reference_mlp_loss(xv, onehot, *values)
        ref.backward()
        assert float(ref.data) == pytest.approx(loss.item(), rel=1e-12)
        for t, v in zip(tensors, values):
            np.testing.assert_allclose(
                backend.to_numpy(v.grad), backend.to_numpy(t.grad), rtol=1e-9, atol=1e-12
            )
        losses.append(loss.item())
        tensors = [
            md.tensor(t.data - lr * t.grad, requires_grad=True, dtype="float64", device=device)
            for t in tensors
        ]
        values = [Value(v.data - lr * v.grad) for v in values]
    assert losses[-1] < losses[0]


def test_numbers_take_the_dtype_of_the_value():
    a = Value(np.ones(3, dtype=np.float32))
    assert (2 * a + 1.5 - a).data.dtype == np.float32
    assert Value([1, 2]).data.dtype == np.float64


def test_backward_needs_a_scalar():
    with pytest.raises(ValueError, match="scalar"):
        (Value(np.ones(3)) * 2).backward()


def test_matmul_takes_matrices_only():
    with pytest.raises(ValueError, match="two matrices"):
        Value(np.ones(3)) @ Value(np.ones((3, 2)))
