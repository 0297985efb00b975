"""Checks of the optim exercises: each update rule against ``minidl.optim`` over several
steps in float64.

The problem is a noisy quadratic: g = c * w + noise_t, so a wrong step
changes every later gradient and the error shows in the trajectory. Momentum
also runs with a learning rate that changes every step (a schedule), where
the velocity form v <- mu v + g, w <- w - lr v and the forms that fold lr into
the velocity or write the step on weight differences part ways.
"""

import numpy as np

from minidl import optim
from minidl.autograd import Tensor
from minidl.exercises import exercise, expect_close, expect_true
from minidl.exercises.checks.tuned import call_leaving, forbids
from minidl.reference.optim import adagrad, adam, momentum, nesterov, rmsprop

WHY = "the weights and the gradient stay the caller's until it takes the new weights"

STEPS = 8
SHAPE = (3, 4)
LR_SCHEDULE = (0.1, 0.1, 0.05, 0.2, 0.02, 0.1, 0.3, 0.01)  # one learning rate per step
TUNED_OPTIMIZERS = forbids(
    optim.SGD,
    optim.Momentum,
    optim.Nesterov,
    optim.AdaGrad,
    optim.RMSProp,
    optim.Adam,
    name="minidl's tuned optimizers (minidl.optim)",
)


def _problem(seed):
    """(w0, gradient(t, w)) of a seeded noisy quadratic in float64."""
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(SHAPE)
    curvature = rng.uniform(0.5, 2.0, SHAPE)
    noise = 0.3 * rng.standard_normal((STEPS,) + SHAPE)
    return w0, lambda t, w: curvature * w + noise[t]


def _step(name, rule, w, g, state, hyper, t):
    """One call of the student's rule, with the contract checked: (new_w, new_state),
    inputs untouched."""
    result = call_leaving(
        f"{name}: step {t}", rule, {"w": w, "g": g, "state": state}, WHY, ("state",), **hyper
    )
    expect_true(
        f"{name}: step {t} must return a pair (new_w, new_state)",
        isinstance(result, tuple) and len(result) == 2,
        detail=f"got {type(result).__name__}",
    )
    new_w, new_state = result
    expect_true(
        f"{name}: step {t} must return the state as a dict",
        isinstance(new_state, dict),
        detail=f"got {type(new_state).__name__}",
    )
    return new_w, new_state


def compare_trajectory(name, rule, tuned_class, hyper, seed, schedule=None):
    """Run ``rule`` and ``tuned_class`` side by side for STEPS steps; fail at the first
    step that differs. ``schedule``: the learning rate of each step instead of a constant."""
    w0, gradient = _problem(seed)
    param = Tensor(w0.copy(), requires_grad=True)
    tuned = tuned_class([param], **hyper)
    w, state = w0.copy(), {}
    label = f"{hyper}" if schedule is None else f"{hyper} and lr = {schedule} step by step"
    for t in range(1, STEPS + 1):
        if schedule is not None:
            hyper = dict(hyper, lr=schedule[t - 1])
            tuned.lr = hyper["lr"]
        param.grad = gradient(t - 1, param.data)
        tuned.step()
        w, state = _step(name, rule, w, gradient(t - 1, w), state, hyper, t)
        expect_close(
            f"{name} with {label}: w after step {t}", w, param.data, rtol=1e-10, atol=1e-12
        )


@exercise(
    "4.1",
    "momentum and Nesterov momentum",
    path="minidl/reference/optim/momentum.py",
    hint="update the velocity v <- mu v + g first (v starts at zero, and holds no lr), then "
    "step by lr v for momentum and by lr (g + mu v) for Nesterov, with this step's lr",
)
@TUNED_OPTIMIZERS
def check_momentum():
    for seed, hyper in enumerate([dict(lr=0.1, momentum=0.9), dict(lr=0.03, momentum=0.5)]):
        compare_trajectory("momentum", momentum, optim.Momentum, hyper, seed)
        compare_trajectory("nesterov", nesterov, optim.Nesterov, hyper, seed)
    for seed, (name, rule, tuned) in enumerate(
        (("momentum", momentum, optim.Momentum), ("nesterov", nesterov, optim.Nesterov)), 2
    ):
        hyper = dict(lr=0.1, momentum=0.9)
        compare_trajectory(name, rule, tuned, hyper, seed, schedule=LR_SCHEDULE)


@exercise(
    "4.2",
    "AdaGrad and RMSProp",
    path="minidl/reference/optim/adaptive.py",
    hint="accumulate g * g elementwise into the state (a sum for AdaGrad, a running mean "
    "with weight alpha for RMSProp), then divide the step by its square root plus eps",
)
@TUNED_OPTIMIZERS
def check_adaptive():
    for seed, hyper in enumerate([dict(lr=0.1), dict(lr=0.05, eps=1e-3)]):
        compare_trajectory("adagrad", adagrad, optim.AdaGrad, hyper, seed)
    for seed, hyper in enumerate([dict(lr=0.01), dict(lr=0.03, alpha=0.9, eps=1e-4)]):
        compare_trajectory("rmsprop", rmsprop, optim.RMSProp, hyper, seed)


@exercise(
    "4.3",
    "Adam with bias correction",
    path="minidl/reference/optim/adam.py",
    hint="keep the step count t and the uncorrected moments m and v in the state; divide "
    "by 1 - beta^t only when you form the step, and add eps outside the root, "
    "sqrt(v_hat) + eps, as Kingma & Ba and PyTorch do: Table 3 of Ben-Nun & Hoefler 2019 "
    "puts it inside, sqrt(v_hat + eps), and folds the correction into the recursion, "
    "which gives another trajectory",
)
@TUNED_OPTIMIZERS
def check_adam():
    for seed, hyper in enumerate([dict(lr=0.01), dict(lr=0.1, betas=(0.5, 0.9), eps=1e-6)]):
        compare_trajectory("adam", adam, optim.Adam, hyper, seed)
