"""Every differentiable op against float64 central differences (md.gradcheck)."""

import numpy as np
import pytest

import minidl as md
from minidl import functional as F


def positive(shape):
    return ("positive", shape)


# (id, function of the input tensors, input shapes)
CASES = [
    ("add_broadcast", lambda a, b: a + b, [(3, 1, 4), (5, 1)]),
    ("sub_broadcast", lambda a, b: a - b, [(4,), (2, 3, 4)]),
    ("mul_broadcast", lambda a, b: a * b, [(2, 3, 4), (3, 1)]),
    ("div_broadcast", lambda a, b: a / b, [(3, 4), positive((4,))]),
    ("pow_tensor", lambda a, b: a**b, [positive((3, 4)), (3, 4)]),
    ("pow_scalar", lambda a: a**3, [(3, 4)]),
    ("rpow", lambda a: 2.0**a, [(5,)]),
    ("neg_and_scalars", lambda a: 3 - 2 * (-a) / 4 + 1, [(2, 3)]),
    ("matmul_2d", lambda a, b: a @ b, [(3, 4), (4, 5)]),
    ("matmul_vec", lambda a, b: a @ b, [(3, 4), (4,)]),
    ("vec_matmul", lambda a, b: a @ b, [(4,), (4, 2)]),
    ("vec_dot", lambda a, b: a @ b, [(4,), (4,)]),
    ("matmul_batched_broadcast", lambda a, b: a @ b, [(2, 1, 3, 4), (5, 4, 2)]),
    ("sum_all", lambda a: a.sum(), [(3, 4)]),
    ("sum_axes", lambda a: a.sum(axis=(0, 2)), [(2, 3, 4)]),
    ("sum_keepdims", lambda a: a.sum(axis=-1, keepdims=True), [(2, 3, 4)]),
    ("mean_axes", lambda a: a.mean(axis=(1, 2)), [(2, 3, 4)]),
    ("mean_all", lambda a: a.mean(), [(3, 4)]),
    ("max_axis", lambda a: a.max(axis=1), [(3, 5)]),
    ("max_axes_keepdims", lambda a: a.max(axis=(0, 2), keepdims=True), [(3, 4, 5)]),
    ("reshape", lambda a: a.reshape(4, -1) * 2, [(2, 3, 2)]),
    ("transpose", lambda a: a.transpose(2, 0, 1) * 2, [(2, 3, 4)]),
    ("T", lambda a: a.T * 2, [(2, 3)]),
    ("flatten", lambda a: F.flatten(a) * 2, [(2, 3, 4)]),
    ("getitem_basic", lambda a: a[1:, ::2, None] * 2, [(3, 4)]),
    ("getitem_int_array_repeats", lambda a: a[np.array([0, 2, 0, 0])] * 2, [(3, 4)]),
    ("getitem_mixed", lambda a: a[:, np.array([1, 1, 3])] * 2, [(3, 4)]),
    ("concatenate", lambda a, b: F.concatenate([a, b, a], axis=1), [(2, 3), (2, 1)]),
    ("stack", lambda a, b: F.stack([a, b], axis=-1), [(2, 3), (2, 3)]),
    ("exp", lambda a: a.exp(), [(3, 4)]),
    ("log", lambda a: a.log(), [positive((3, 4))]),
    ("sqrt", lambda a: a.sqrt(), [positive((3, 4))]),
    ("relu", lambda a: a.relu(), [(3, 4)]),
    ("tanh", lambda a: a.tanh(), [(3, 4)]),
    ("sigmoid", lambda a: a.sigmoid(), [(3, 4)]),
    ("softmax", lambda a: F.softmax(a, axis=1), [(3, 5)]),
    ("softmax_axis0", lambda a: F.softmax(a, axis=0), [(3, 5)]),
    ("log_softmax", lambda a: F.log_softmax(a), [(3, 5)]),
    ("cross_entropy_mean", lambda a: F.cross_entropy(a, np.array([0, 4, 2])), [(3, 5)]),
    (
        "cross_entropy_sum",
        lambda a: F.cross_entropy(a, np.array([1, 1, 0]), reduction="sum"),
        [(3, 5)],
    ),
    (
        "cross_entropy_none",
        lambda a: F.cross_entropy(a, np.array([3, 2, 1]), reduction="none"),
        [(3, 5)],
    ),
    ("mse", lambda a, b: F.mse_loss(a, b), [(3, 4), (3, 4)]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [(4, 3), (5, 3), (5,)]),
    ("linear_3d_no_bias", lambda x, w: F.linear(x, w), [(2, 4, 3), (5, 3)]),
    ("max_pool_2x2", lambda x: F.max_pool2d(x, 2), [(2, 3, 6, 6)]),
    ("max_pool_overlap_pad", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [(2, 2, 7, 6)]),
    ("max_pool_rect", lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2)), [(1, 2, 5, 7)]),
    ("avg_pool_overlap_pad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), [(2, 2, 7, 6)]),
    ("avg_pool_2x2", lambda x: F.avg_pool2d(x, 2), [(2, 3, 4, 6)]),
    (
        "batch_norm_train_2d",
        lambda x, w, b: F.batch_norm(x, weight=w, bias=b, training=True),
        [(4, 3, 3, 2), (3,), (3,)],
    ),
    (
        "batch_norm_train_1d",
        lambda x, w, b: F.batch_norm(x, weight=w, bias=b, training=True),
        [(5, 4), (4,), (4,)],
    ),
    (
        "local_response_norm_even",
        lambda x: F.local_response_norm(x, 4, alpha=0.3, beta=0.75, k=1.5),
        [(2, 6, 3, 3)],
    ),
    (
        "local_response_norm_odd",
        lambda x: F.local_response_norm(x, 5, alpha=0.5, beta=0.6, k=2.0),
        [(2, 7, 2, 3)],
    ),
]


def make_inputs(shapes, rng):
    tensors = []
    for shape in shapes:
        if isinstance(shape, tuple) and shape and shape[0] == "positive":
            data = rng.uniform(0.5, 2.0, shape[1])
        else:
            data = rng.standard_normal(shape)
        tensors.append(md.tensor(data, requires_grad=True, dtype="float64"))
    return tensors


@pytest.mark.parametrize("fn,shapes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_op_gradient_matches_central_differences(fn, shapes, rng):
    assert md.gradcheck(fn, *make_inputs(shapes, rng))


def test_max_pool_gradient_goes_to_the_first_maximum_on_ties():
    x = md.tensor(np.ones((1, 1, 2, 2)), requires_grad=True, dtype="float64")
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad[0, 0], [[1, 0], [0, 0]])


def test_batch_norm_eval_uses_running_statistics(rng):
    x = md.tensor(rng.standard_normal((4, 3)), requires_grad=True, dtype="float64")
    w = md.tensor(rng.standard_normal(3), requires_grad=True, dtype="float64")
    mean, var = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    assert md.gradcheck(lambda x, w: F.batch_norm(x, mean, var, weight=w, training=False), x, w)
    y = F.batch_norm(x, mean, var, training=False).numpy()
    np.testing.assert_allclose(y, (x.numpy() - mean) / np.sqrt(var + 1e-5))


def test_dropout_gradient_with_a_fixed_mask(rng):
    x = md.tensor(rng.standard_normal((4, 5)), requires_grad=True, dtype="float64")

    def fn(x):
        md.manual_seed(3)  # the same mask on every evaluation
        return F.dropout(x, 0.4, training=True)

    assert md.gradcheck(fn, x)


def test_dropout_keyed_by_sample_does_not_depend_on_the_split_of_the_batch(rng):
    from minidl.random import set_sample_keys

    x = md.tensor(1.0 + rng.random((6, 40)), dtype="float64")
    keys = [(0, 1, index) for index in (9, 2, 7, 4, 0, 5)]

    def masks(rows):
        set_sample_keys([keys[i] for i in rows])
        try:
            first = F.dropout(x[rows], 0.5, training=True).numpy()
            return first, F.dropout(x[rows], 0.5, training=True).numpy()  # the step's 2nd draw
        finally:
            set_sample_keys(None)

    whole = masks(list(range(6)))
    halves = [masks([0, 1, 2]), masks([3, 4, 5])]
    for draw in (0, 1):
        np.testing.assert_array_equal(np.concatenate([h[draw] for h in halves]), whole[draw])
    assert not np.array_equal(whole[0] == 0, whole[1] == 0)  # each draw of the step its own mask
    assert 0.3 < (whole[0] == 0).mean() < 0.7
    md.manual_seed(1)
    shared = F.dropout(x, 0.5, training=True).numpy()  # no keys: the shared generator
    md.manual_seed(1)
    set_sample_keys(keys[:5])  # keys of another batch size are not used
    try:
        np.testing.assert_array_equal(F.dropout(x, 0.5, training=True).numpy(), shared)
    finally:
        set_sample_keys(None)


def test_gradcheck_detects_a_wrong_gradient_and_names_the_element(rng):
    class WrongSquare(md.Function):
        def forward(self, x):
            self.x = x
            return x * x

        def backward(self, g):
            wrong = 2 * self.x * g
            wrong[1, 2] += 0.5
            return wrong

    x = md.tensor(rng.standard_normal((3, 4)), requires_grad=True, dtype="float64")
    with pytest.raises(md.GradcheckError, match=r"index \(1, 2\)"):
        md.gradcheck(lambda x: WrongSquare.apply(x), x)


def test_gradcheck_refuses_float32():
    x = md.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(TypeError, match="float64"):
        md.gradcheck(lambda x: x * 2, x)


class SquareWithBadElement(md.Function):
    """x * x whose backward puts ``bad`` at index ``at`` (and optionally a wrong finite value)."""

    bad, at, also_wrong = np.nan, (1, 2), None

    def forward(self, x):
        self.x = x
        return x * x

    def backward(self, g):
        grad = 2 * self.x * g
        grad[self.at] = self.bad
        if self.also_wrong is not None:
            grad[self.also_wrong] += 0.5
        return grad


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_gradcheck_fails_on_a_non_finite_analytical_gradient(bad, rng):
    class Bad(SquareWithBadElement):
        pass

    Bad.bad, Bad.also_wrong = bad, (0, 0)  # a finite error elsewhere must not hide it
    x = md.tensor(rng.standard_normal((3, 4)), requires_grad=True, dtype="float64")
    with pytest.raises(
        md.GradcheckError,
        match=rf"input 0 at index \(1, 2\): the analytical gradient "
        rf"\(backward\) is {bad}",
    ):
        md.gradcheck(lambda x: Bad.apply(x), x)


def test_gradcheck_names_the_input_whose_gradient_is_nan(rng):
    a, b = (
        md.tensor(rng.standard_normal((3, 4)), requires_grad=True, dtype="float64")
        for _ in range(2)
    )
    with pytest.raises(md.GradcheckError, match=r"input 1 at index \(1, 2\).* is nan"):
        md.gradcheck(lambda a, b: a * 3 + SquareWithBadElement.apply(b), a, b)


def test_gradcheck_fails_where_the_function_is_nan_near_the_point():
    # log(x - eps) is NaN for x[2] = eps / 2: only that element's numerical derivative is NaN
    x = md.tensor([1.0, 2.0, 5e-7, 3.0], requires_grad=True, dtype="float64")
    before = x.numpy().copy()
    with (
        np.errstate(invalid="ignore"),
        pytest.raises(
            md.GradcheckError, match=r"input 0 at index \(2,\): the numerical gradient is nan"
        ),
    ):
        md.gradcheck(lambda x: x.log(), x)
    np.testing.assert_array_equal(x.numpy(), before)


def test_gradcheck_fails_where_the_function_is_nan_at_the_point(rng):
    class NanAtOne(md.Function):
        """Finite backward, but the value is NaN at one element: every difference is NaN."""

        def forward(self, x):
            y = x * 2
            y[0, 1] = np.nan
            return y

        def backward(self, g):
            return 2 * g

    x = md.tensor(rng.standard_normal((2, 3)), requires_grad=True, dtype="float64")
    with pytest.raises(
        md.GradcheckError,
        match=r"input 0 at index \(0, 0\): the numerical gradient is nan "
        r"\(analytical .*\): fn is not finite",
    ):
        md.gradcheck(lambda x: NanAtOne.apply(x), x)
