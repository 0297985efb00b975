"""The engine itself: graph traversal, accumulation, modes, hooks and its error messages."""

import gc
import warnings
import weakref

import numpy as np
import pytest

import minidl as md
from minidl import functional as F


def leaf(values, dtype="float64"):
    return md.tensor(values, requires_grad=True, dtype=dtype)


def test_tensor_used_twice_accumulates_both_paths():
    x = leaf([1.0, 2.0, 3.0])
    y = x * x + x * 3  # dy/dx = 2x + 3
    y.sum().backward()
    np.testing.assert_allclose(x.grad, 2 * x.numpy() + 3)


def test_diamond_graph_each_node_is_processed_once():
    x = leaf([2.0])
    a = x * 3
    b = a * a  # 9x^2
    c = a + b  # 3x + 9x^2 -> 3 + 18x
    (c * c).sum().backward()  # 2c (3 + 18x)
    cx = 3 * 2 + 9 * 4
    np.testing.assert_allclose(x.grad, [2 * cx * (3 + 18 * 2)])


def test_grads_accumulate_across_backward_calls_until_zeroed():
    x = leaf([1.0, -1.0])
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad, [5.0, 5.0])


def test_broadcast_gradient_has_the_input_shape():
    a = leaf(np.ones((2, 3)))
    b = leaf(np.ones((3,)))
    s = leaf(np.ones((1, 1)))
    (a * b * s).sum().backward()
    assert b.grad.shape == (3,) and s.grad.shape == (1, 1)
    np.testing.assert_allclose(b.grad, [2, 2, 2])
    np.testing.assert_allclose(s.grad, [[6]])


def test_leaf_gradient_is_its_own_writable_array():
    a, b, c = leaf(np.ones(3)), leaf(np.ones(3)), leaf(np.ones(3))
    ((a + b) * c).sum().backward()  # a and b receive the same product array
    assert a.grad.flags.writeable and b.grad.flags.writeable
    a.grad *= 5  # must not change b.grad through a shared broadcast view
    np.testing.assert_allclose(b.grad, [1, 1, 1])


def test_no_grad_builds_no_graph():
    x = leaf([1.0, 2.0])
    with md.no_grad():
        y = x * 2
    assert not y.requires_grad and y.is_leaf
    assert md.is_grad_enabled()


def test_detach_cuts_the_graph():
    x = leaf([1.0, 2.0])
    y = (x * 2).detach() * x
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [2.0, 4.0])  # only the direct path


def test_graph_is_freed_after_backward():
    x = leaf(np.ones(1000))
    y = x.exp()
    saved = weakref.ref(y._ctx)
    loss = y.sum()
    loss.backward()
    gc.collect()
    assert saved() is None  # the Function and its saved arrays are gone
    with pytest.raises(RuntimeError, match="second time.*retain_graph"):
        loss.backward()


def test_retain_graph_allows_a_second_backward():
    x = leaf([3.0])
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(x.grad, [12.0])


def test_backward_on_non_scalar_needs_a_gradient():
    x = leaf(np.ones((2, 2)))
    with pytest.raises(RuntimeError, match=r"shape \(2, 2\).*grad="):
        (x * 2).backward()
    (x * 2).backward(np.ones((2, 2)))
    np.testing.assert_allclose(x.grad, 2 * np.ones((2, 2)))


def test_backward_without_requires_grad_is_an_error():
    with pytest.raises(RuntimeError, match="does not require grad"):
        md.tensor([1.0]).sum().backward()


def test_shape_mismatch_names_the_op_and_both_shapes():
    with pytest.raises(md.ShapeError, match=r"add: shapes \(2, 3\) and \(4,\)"):
        md.tensor(np.ones((2, 3))) + md.tensor(np.ones(4))
    with pytest.raises(md.ShapeError, match=r"matmul: shapes \(2, 3\) and \(4, 5\)"):
        md.tensor(np.ones((2, 3))) @ md.tensor(np.ones((4, 5)))
    with pytest.raises(md.ShapeError, match=r"reshape: cannot reshape \(2, 3\)"):
        md.tensor(np.ones((2, 3))).reshape(4, 2)


def test_operands_on_different_devices_are_refused():
    class FakeDeviceArray:  # stands in for a GPU array: not a NumPy ndarray
        shape, dtype, ndim = (3,), np.dtype("float32"), 1

    with pytest.raises(md.DeviceError, match="different devices"):
        md.autograd._check_same_device("add", [np.ones(3), FakeDeviceArray()])


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match="floating-point"):
        md.tensor([1, 2], requires_grad=True, dtype="int64")


def test_scalars_keep_the_tensor_dtype():
    x = md.tensor([1.0, 2.0])
    for y in (x * 2, 2 * x, x / 3, 1 - x, x**2, -x):
        assert y.dtype == np.float32


def test_ndarray_on_the_left_defers_to_tensor():
    x = leaf([1.0, 2.0])
    y = np.array([3.0, 4.0]) * x
    assert isinstance(y, md.Tensor)
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [3.0, 4.0])


def test_post_accumulate_hook_fires_once_after_the_last_contribution():
    x = leaf([1.0, 2.0])
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.copy()))
    (x * 2 + x * x + x).sum().backward()  # three uses of x
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], [2 + 2 + 1, 2 + 4 + 1])
    handle.remove()
    (x * 2).sum().backward()
    assert len(seen) == 1


def test_hooks_fire_in_reverse_layer_order():
    w1, w2 = leaf(np.ones((3, 3))), leaf(np.ones((3, 3)))
    order = []
    w1.register_post_accumulate_grad_hook(lambda t: order.append("w1"))
    w2.register_post_accumulate_grad_hook(lambda t: order.append("w2"))
    x = md.tensor(np.ones((2, 3)), dtype="float64")
    ((x @ w1).relu() @ w2).sum().backward()
    assert order == ["w2", "w1"]


def test_deep_chain_does_not_hit_the_recursion_limit():
    x = leaf([1.0])
    y = x
    for _ in range(5000):
        y = y * 1.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [1.0])


def test_item_numpy_len_and_repr():
    x = md.tensor([[1.5, 2.0]])
    assert x[0, 1].item() == 2.0 and len(x) == 1
    assert isinstance(x.numpy(), np.ndarray)
    assert "requires_grad=True" in repr(leaf([1.0]))
    with pytest.raises(ValueError, match="one element"):
        x.item()


def test_to_dtype_is_differentiable():
    x = leaf([1.0, 2.0], dtype="float32")
    y = x.to("float64")
    assert y.dtype == np.float64
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad, [2.0, 4.0])


def test_cross_entropy_rejects_bad_labels():
    logits = md.tensor(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"label 3 is out of range for 3 classes"):
        F.cross_entropy(logits, np.array([0, 3]))
    with pytest.raises(ValueError, match=r"label -1"):
        F.cross_entropy(logits, np.array([-1, 0]))
    with pytest.raises(TypeError, match="integers"):
        F.cross_entropy(logits, np.array([0.0, 1.0]))
    with pytest.raises(md.ShapeError, match=r"\(3,\).*\(2,\)"):
        F.cross_entropy(logits, np.array([0, 1, 2]))


def test_softmax_is_stable_for_huge_logits():
    x = md.tensor([[1000.0, 0.0, -1000.0]])
    np.testing.assert_allclose(F.softmax(x).numpy(), [[1, 0, 0]], atol=1e-6)
    assert np.isfinite(F.log_softmax(x).numpy()[0, :2]).all()
    loss = F.cross_entropy(md.tensor([[1000.0, 0.0]], requires_grad=True), np.array([1]))
    assert loss.item() == pytest.approx(1000.0)


def test_non_finite_logits_give_a_non_finite_loss_without_numpy_warnings():
    """A diverged run's logits: the NaN or inf loss is the report, NumPy's warnings are not."""
    logits = md.tensor(
        [[np.inf, 1.0, -np.inf], [np.nan, 0.0, 0.0], [3e38, -3e38, 0.0]], requires_grad=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = F.cross_entropy(logits, np.array([0, 1, 1]), reduction="none")
        loss.sum().backward()
        probs, logp = F.softmax(logits).numpy(), F.log_softmax(logits).numpy()
    assert np.isnan(loss.numpy()[:2]).all() and loss.numpy()[2] == np.inf
    assert np.isnan(probs[:2]).all() and np.isnan(logp[:2]).all()
    np.testing.assert_array_equal(probs[2], [1, 0, 0])
    np.testing.assert_array_equal(logp[2], np.float32([0, -np.inf, -3e38]))


@pytest.mark.parametrize(
    "data,error,shown",
    [
        (None, TypeError, r"None \(a NoneType\): NumPy reads it as dtype object"),
        ([1.0, None], TypeError, r"\[1\.0, None\] \(a list\)"),
        ("1.5", TypeError, r"'1\.5' \(a str\): NumPy reads it as dtype <U3"),
        (
            np.array([1, None], dtype=object),
            TypeError,
            r"array\(\[1, None\], dtype=object\) \(a ndarray\): NumPy reads it as dtype object",
        ),
        ([[1, 2], [3]], ValueError, r"\[\[1, 2\], \[3\]\] \(a list\)"),
    ],
)
@pytest.mark.parametrize("make", [md.tensor, md.Tensor], ids=["md.tensor", "md.Tensor"])
def test_tensor_refuses_what_is_not_numbers(make, data, error, shown):
    with pytest.raises(
        error,
        match=rf"cannot make a tensor from {shown}.*; pass a NumPy or "
        r"CuPy array of numbers, a Python number",
    ):
        make(data)


def test_tensor_casts_to_its_dtype_and_copies_while_Tensor_wraps_as_is():
    a = np.array([0.1, 0.2])  # float64
    t = md.tensor(a)
    assert t.dtype == np.float32 and not np.shares_memory(t.data, a)
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float32))
    assert md.tensor(a, dtype="float64").dtype == np.float64
    assert md.tensor([1, 2]).dtype == np.float32
    assert md.tensor(True).dtype == np.float32 and md.tensor(3).item() == 3.0
    w = md.Tensor(a)
    assert w.data is a and w.dtype == np.float64
    assert md.Tensor([1, 2]).dtype == np.asarray([1, 2]).dtype  # what NumPy makes of the list
