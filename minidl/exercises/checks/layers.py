"""Checks of the layer exercises (2.x): minidl/reference/functional/.

Each check runs the reference forward (given code) and the exercise's
backward on seeded float64 inputs with a random upstream gradient, and
compares the gradients with minidl's tuned ops (``minidl.functional``) on
the same inputs; those share no code with the exercise regions.
"""

import numpy as np

import minidl as md
from minidl import functional as F
from minidl.reference.functional import activations, batch_norm, linear, loss, lrn, pooling

from .. import exercise, expect_close, expect_true
from .tuned import call_leaving, forbids

FUNCTIONAL = "minidl/reference/functional/"
WHY = "autograd reuses what the forward saved, and the upstream gradient is shared"
AUTOGRAD = forbids(md.Tensor.backward, name="minidl's autograd (Tensor.backward)")


def _shape_text(value):
    """``value``'s shape and dtype, or its type when it is not an array."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}, {value.dtype}"
    return f"a {type(value).__name__}"


def tuned_gradients(fn, arrays, dout):
    """Gradients of sum(dout * fn(*inputs)) for each input array, by minidl's tuned ops
    in float64."""
    tensors = [md.tensor(a, requires_grad=True, dtype="float64") for a in arrays]
    fn(*tensors).backward(md.tensor(dout, dtype="float64"))
    return [t.grad for t in tensors]


def compare_backward(what, forward, backward, tuned, arrays, names, rng):
    """``backward(dout, cache)`` after ``forward(*arrays)`` against the tuned op's gradients
    (computed before the backward runs), which must leave ``dout`` and ``cache`` as they were."""
    out, cache = forward(*arrays)
    dout = rng.standard_normal(np.shape(out))
    expected = tuned_gradients(tuned, arrays, dout)
    got = call_leaving(f"{what}: backward", backward, {"dout": dout, "cache": cache}, WHY)
    got = got if isinstance(got, (tuple, list)) else (got,)
    expect_true(
        f"{what}: backward returns one gradient per input ({', '.join(names)})",
        len(got) >= len(names),
        detail=f"got {len(got)}",
    )
    for name, g, e in zip(names, got, expected):
        expect_close(f"{what}: d/d{name}", g, e, rtol=1e-8, atol=1e-11)
    return got


@exercise(
    "2.1",
    "Fully connected layer backward",
    path=FUNCTIONAL + "linear.py",
    hint="y[n, o] = sum_i x[n, i] W[o, i] + b[o]: write each gradient as a matrix "
    "product of dout with x or W (check the shapes), and sum dout over the batch for db",
)
@AUTOGRAD
def check_linear():
    compare_linear(np.random.default_rng(21), batch=5, inputs=3, outputs=4)


def compare_linear(rng, batch, inputs, outputs):
    """The linear backward with and without a bias, on seeded inputs of these sizes."""
    arrays = [
        rng.standard_normal((batch, inputs)),
        rng.standard_normal((outputs, inputs)),
        rng.standard_normal(outputs),
    ]
    shapes = f"x ({batch}, {inputs}), W ({outputs}, {inputs})"
    compare_backward(
        f"linear with {shapes}, b ({outputs},)",
        linear.linear_forward,
        linear.linear_backward,
        F.linear,
        arrays,
        ["x", "W", "b"],
        rng,
    )
    db = compare_backward(
        f"linear with {shapes} and no bias",
        linear.linear_forward,
        linear.linear_backward,
        F.linear,
        arrays[:2],
        ["x", "W"],
        rng,
    )[2:]
    expect_true(
        "linear without a bias: db is None",
        len(db) == 1 and db[0] is None,
        detail=f"got {'nothing' if not db else _shape_text(db[0])} for db: the layer has no "
        "bias, so there is no gradient of it; return None for db when the cache says so",
    )


@exercise(
    "2.2",
    "Softmax cross-entropy backward",
    path=FUNCTIONAL + "loss.py",
    hint="the gradient of the mean loss is (softmax - one-hot of the labels) / batch size, "
    "times the upstream gradient dout",
)
@AUTOGRAD
def check_softmax_cross_entropy():
    rng = np.random.default_rng(22)
    labels = rng.integers(0, 5, 6)
    labels[:2] = 3  # a repeated label
    compare_backward(
        "softmax cross-entropy of (6, 5) logits",
        lambda z: loss.softmax_cross_entropy_forward(z, labels),
        loss.softmax_cross_entropy_backward,
        lambda z: F.cross_entropy(z, labels),
        [2 * rng.standard_normal((6, 5))],
        ["logits"],
        rng,
    )


@exercise(
    "2.3",
    "Max-pooling backward",
    path=FUNCTIONAL + "pooling.py",
    hint="for each output position, find the first maximum of its window (argmax of the "
    "flattened window) and add the output's gradient there; windows may overlap",
)
@AUTOGRAD
def check_max_pool():
    rng = np.random.default_rng(23)
    for name, x, options in (
        ("2x2 stride 2", rng.standard_normal((2, 3, 6, 6)), dict(kernel_size=2)),
        (
            "3x3 stride 2 padding 1",
            rng.standard_normal((2, 2, 7, 6)),
            dict(kernel_size=3, stride=2, padding=1),
        ),
        (
            "3x3 stride 1 with ties (the first maximum gets it all)",
            rng.integers(0, 3, (2, 2, 5, 5)).astype(np.float64),
            dict(kernel_size=3, stride=1),
        ),
    ):
        compare_backward(
            f"max pooling {name} of {x.shape}",
            lambda a: pooling.max_pool_forward(a, **options),
            pooling.max_pool_backward,
            lambda t: F.max_pool2d(t, **options),
            [x],
            ["x"],
            rng,
        )


@exercise(
    "2.4",
    "Batch-normalisation backward (training mode)",
    path=FUNCTIONAL + "batch_norm.py",
    hint="the batch mean and variance depend on every x of the channel: chain through "
    "dvar and dmu before adding their shares to dx",
)
@AUTOGRAD
def check_batch_norm():
    rng = np.random.default_rng(24)
    for shape in ((8, 3), (4, 3, 3, 5)):
        arrays = [
            3 * rng.standard_normal(shape) + 1,
            rng.uniform(0.5, 1.5, 3),
            rng.standard_normal(3),
        ]
        compare_backward(
            f"batch norm (training) of {shape}",
            lambda x, g, b: batch_norm.batch_norm_forward(x, g, b, training=True),
            batch_norm.batch_norm_backward,
            lambda x, g, b: F.batch_norm(x, weight=g, bias=b, training=True),
            arrays,
            ["x", "gamma", "beta"],
            rng,
        )


@exercise(
    "2.5",
    "Local response normalisation backward",
    path=FUNCTIONAL + "lrn.py",
    hint="a_i enters b_i directly and every s_c whose window holds channel i: add the "
    "direct term and the sum over those c of db_c a_c s_c^(-beta-1)",
)
@AUTOGRAD
def check_lrn():
    rng = np.random.default_rng(25)
    x = rng.standard_normal((2, 7, 3, 3))
    for size, alpha, beta, k in ((5, 0.5, 0.75, 2.0), (4, 1.0, 0.6, 1.0), (1, 0.3, 0.75, 1.0)):
        compare_backward(
            f"LRN of {x.shape} with size={size}, alpha={alpha}, beta={beta}, k={k}",
            lambda a: lrn.lrn_forward(a, size, alpha, beta, k),
            lrn.lrn_backward,
            lambda t: F.local_response_norm(t, size, alpha, beta, k),
            [x],
            ["x"],
            rng,
        )


@exercise(
    "2.6",
    "Activation derivatives (ReLU, sigmoid, tanh)",
    path=FUNCTIONAL + "activations.py",
    hint="multiply dout by the derivative, written with what the forward cached "
    "(the input for ReLU, the output for sigmoid and tanh)",
)
@AUTOGRAD
def check_activations():
    rng = np.random.default_rng(26)
    x = rng.standard_normal((4, 5))
    x[np.abs(x) < 1e-3] = 0.5  # keep away from ReLU's kink
    for name, forward, backward, tuned in (
        ("relu", activations.relu_forward, activations.relu_backward, F.relu),
        ("sigmoid", activations.sigmoid_forward, activations.sigmoid_backward, F.sigmoid),
        ("tanh", activations.tanh_forward, activations.tanh_backward, F.tanh),
    ):
        compare_backward(f"{name} of a (4, 5) input", forward, backward, tuned, [x], ["x"], rng)
