"""The checks of exercises 1.x and 2.x: they pass on the reference code and fail, saying
what differs, on typical wrong answers."""

import numpy as np
import pytest

from minidl import exercises
from minidl.exercises.checks import autograd as autograd_checks
from minidl.reference import autograd
from minidl.reference.functional import activations, batch_norm, linear, loss, lrn, pooling

IDS = ["1.1", "1.2", "1.3", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6"]


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_passes_on_the_reference(exercise_id):
    found = exercises.get(exercise_id)
    found.check()
    assert found.topic in ("autograd", "layers")


def backward_in_topological_order(self):
    """Wrong: runs the local rules from the leaves to the output."""
    self.grad = np.ones_like(self.data)
    for v in autograd.topological_order(self):
        v._backward()


def matmul_assigning(self, other):
    """Wrong: the rule assigns to .grad instead of adding, so s @ s loses a share."""
    out = autograd.Value(self.data @ other.data, (self, other), "@")

    def _backward():
        self.grad = out.grad @ other.data.T
        other.grad = self.data.T @ out.grad

    out._backward = _backward
    return out


def batch_norm_ignoring_the_statistics(dout, cache):
    """Wrong: treats the batch mean and variance as constants."""
    _, inv_std, x_hat, gamma, _ = cache
    axes = batch_norm.channel_axes(dout)
    return (
        dout * batch_norm.per_channel(gamma, dout.ndim) * inv_std,
        (dout * x_hat).sum(axis=axes),
        dout.sum(axis=axes),
    )


def max_pool_to_every_maximum(dout, cache):
    """Wrong: a tie sends the gradient to every maximum of the window."""
    xpad, shape, geometry = cache
    dxpad = np.zeros_like(xpad)
    for i in range(geometry[3][0]):
        for j in range(geometry[3][1]):
            w = pooling.window(xpad, i, j, geometry)
            at_max = w == w.max(axis=(2, 3), keepdims=True)
            pooling.window(dxpad, i, j, geometry)[...] += at_max * dout[:, :, i, j, None, None]
    return pooling.unpad(dxpad, geometry, shape)


MUTANTS = [
    ("1.1", autograd.Value, "backward", backward_in_topological_order),
    (
        "1.1",
        autograd_checks,
        "topological_order",
        lambda root: autograd.topological_order(root)[::-1],
    ),  # children before parents
    ("1.2", autograd_checks, "unbroadcast", lambda grad, shape: grad.sum(axis=0)),
    ("1.3", autograd.Value, "__matmul__", matmul_assigning),
    ("2.1", linear, "linear_backward", lambda d, c: (d @ c[1], c[0].T @ d, d.sum(axis=0))),
    ("2.2", loss, "softmax_cross_entropy_backward", lambda d, c: (c[0] - 1) * d),
    ("2.3", pooling, "max_pool_backward", max_pool_to_every_maximum),
    ("2.4", batch_norm, "batch_norm_backward", batch_norm_ignoring_the_statistics),
    ("2.5", lrn, "lrn_backward", lambda d, c: d * c[1] ** -c[4]),
    ("2.6", activations, "sigmoid_backward", lambda d, y: d * y),
]


@pytest.mark.parametrize(
    "exercise_id,owner,name,wrong", MUTANTS, ids=[f"{m[0]}-{m[2]}" for m in MUTANTS]
)
def test_check_fails_on_a_wrong_answer_and_says_what_differs(
    exercise_id, owner, name, wrong, monkeypatch
):
    monkeypatch.setattr(owner, name, wrong)
    with pytest.raises(exercises.ExerciseFailure, match="expected|missing|wrong shape|before"):
        exercises.get(exercise_id).check()
