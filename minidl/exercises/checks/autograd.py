"""Checks of the autograd exercises (1.x): minidl/reference/autograd.py.

The oracle is minidl's own autograd engine (``minidl.Tensor``) on the same
float64 expression; it shares no code with the exercise regions.
"""

from collections.abc import Iterable

import numpy as np

import minidl as md
from minidl.autograd import Tensor
from minidl.exercises.checks.tuned import forbids
from minidl.functional import unbroadcast as tuned_unbroadcast
from minidl.reference.autograd import Value, topological_order, unbroadcast

from .. import exercise, expect_close, expect_equal, expect_true

AUTOGRAD = "minidl/reference/autograd.py"


def tensors_and_values(arrays):
    """The same float64 arrays as minidl Tensors that require grad and as reference Values."""
    return (
        [md.tensor(a, requires_grad=True, dtype="float64") for a in arrays],
        [Value(a.copy()) for a in arrays],
    )


def expression(a, b, c):
    """A scalar in which b and the product a * b are used several times (works on Values
    and Tensors)."""
    h = a * b
    u = h + c.log()
    return (u.relu() * h + (h - a).exp() * c).sum()


def reachable(root):
    """Every Value ``root`` depends on, by a plain search over ``parents``."""
    seen, stack = {}, [root]
    while stack:
        v = stack.pop()
        if id(v) not in seen:
            seen[id(v)] = v
            stack.extend(v.parents)
    return seen


@exercise(
    "1.1",
    "Topological order and the backward pass",
    path=AUTOGRAD,
    hint="in topological_order, append a Value only after visiting all its parents; "
    "in backward, seed the output's gradient with ones and run each Value's "
    "_backward from the output back to the leaves",
)
@forbids(Tensor.backward, name="minidl's autograd")
def check_backward():
    rng = np.random.default_rng(11)
    arrays = [
        rng.standard_normal((3, 4)),
        rng.standard_normal((3, 4)),
        rng.uniform(0.5, 2.0, (3, 4)),
    ]
    tensors, values = tensors_and_values(arrays)
    loss = expression(*values)
    returned = topological_order(loss)
    expect_true(
        "topological_order returns a sequence of Values (a list, a tuple, a deque ...)",
        isinstance(returned, Iterable) and not isinstance(returned, (str, bytes, Value)),
        detail=f"got {type(returned).__name__}",
    )
    order = list(returned)
    expect_true(
        "every item of the order is a Value",
        all(isinstance(v, Value) for v in order),
        detail=f"items seen: {sorted({type(v).__name__ for v in order})}",
    )
    expected = reachable(loss)
    expect_equal("number of Values in the order (each Value once)", len(order), len(expected))
    missing = len(set(expected) - {id(v) for v in order})
    expect_true(
        "the order holds every Value the loss depends on",
        missing == 0,
        detail=f"{missing} of the {len(expected)} Values are missing",
    )
    position = {id(v): k for k, v in enumerate(order)}
    for v in order:
        for parent in v.parents:
            expect_true(
                "a parent comes before its child in the order",
                position[id(parent)] < position[id(v)],
                detail=f"{parent} is at position {position[id(parent)]}, "
                f"its child {v} at {position[id(v)]}",
            )
    loss.backward()
    expression(*tensors).backward()
    expect_close("dL/dL after backward()", loss.grad, np.ones(()))
    for name, t, v in zip("abc", tensors, values):
        expect_close(f"dL/d{name} after backward()", v.grad, t.grad, rtol=1e-9, atol=1e-12)


@exercise(
    "1.2",
    "Broadcasting: sum the gradient back to the operand's shape",
    path=AUTOGRAD,
    hint="sum away the leading axes that broadcasting added, then sum with keepdims=True "
    "over every axis where the operand has size 1 and the gradient does not",
)
@forbids(Tensor.backward, tuned_unbroadcast, name="minidl's autograd")
def check_unbroadcast():
    rng = np.random.default_rng(12)
    for grad_shape, shape in (
        ((3, 4), (4,)),
        ((3, 4), (1, 4)),
        ((3, 4), (3, 1)),
        ((2, 3, 4), (3, 1)),
        ((2, 3, 4), ()),
        ((2, 1, 4), (1, 1, 4)),
    ):
        grad = rng.standard_normal(grad_shape)
        expect_close(
            f"unbroadcast of a {grad_shape} gradient to {shape}",
            unbroadcast(grad, shape),
            tuned_unbroadcast(grad, shape),
            rtol=1e-12,
        )
    arrays = [rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 1))]
    g = rng.standard_normal((2, 3, 4))
    tensors, values = tensors_and_values(arrays)
    out = values[0] * values[1]
    out.grad = g
    out._backward()
    (tensors[0] * tensors[1]).backward(md.tensor(g, dtype="float64"))
    for name, t, v in zip("ab", tensors, values):
        expect_close(
            f"d/d{name} of a * b with a {arrays[0].shape} and b {arrays[1].shape} (the rule of *)",
            v.grad,
            t.grad,
            rtol=1e-9,
            atol=1e-12,
        )


@exercise(
    "1.3",
    "Matrix product backward",
    path=AUTOGRAD,
    hint="for out = a @ b, each of a.grad and b.grad gains the product of out.grad with "
    "the other operand, transposed so the shapes match; add to .grad, do not assign",
)
@forbids(Tensor.backward, name="minidl's autograd")
def check_matmul():
    rng = np.random.default_rng(13)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal((4, 5))]
    g = rng.standard_normal((3, 5))
    tensors, values = tensors_and_values(arrays)
    out = values[0] @ values[1]
    out.grad = g
    out._backward()
    (tensors[0] @ tensors[1]).backward(md.tensor(g, dtype="float64"))
    for name, t, v in zip("ab", tensors, values):
        expect_close(
            f"d/d{name} of a @ b with a (3, 4) and b (4, 5)", v.grad, t.grad, rtol=1e-9, atol=1e-12
        )
    (s_tensor,), (s_value,) = tensors_and_values([rng.standard_normal((4, 4))])
    g = rng.standard_normal((4, 4))
    square = s_value @ s_value
    square.grad = g
    square._backward()
    (s_tensor @ s_tensor).backward(md.tensor(g, dtype="float64"))
    expect_close(
        "d/ds of s @ s (s is both operands: its two shares add up)",
        s_value.grad,
        s_tensor.grad,
        rtol=1e-9,
        atol=1e-12,
    )
