"""The reference update rules against minidl.optim and torch.optim over 50 steps in float64.

Each rule runs through ``ReferenceOptimizer`` on a noisy quadratic
(g = c * w + noise_t, so every step feeds the next gradient), with and
without weight decay; the tuned optimizers and PyTorch's are the oracles.
``ReferenceOptimizer`` then trains a small classifier to the same weights as
the tuned optimizer.
"""

import numpy as np
import pytest

import minidl as md
from minidl import backend, optim
from minidl import functional as F
from minidl import layers as L
from minidl.autograd import Tensor
from minidl.reference.optim import RULES, ReferenceOptimizer

STEPS = 50
SHAPE = (4, 5)

# rule: (tuned class, torch class name and fixed options, hyper-parameters in PyTorch's names)
CASES = {
    "sgd": (optim.SGD, ("SGD", {}), dict(lr=0.05)),
    "momentum": (optim.Momentum, ("SGD", {}), dict(lr=0.02, momentum=0.9)),
    "nesterov": (optim.Nesterov, ("SGD", dict(nesterov=True)), dict(lr=0.02, momentum=0.8)),
    "adagrad": (optim.AdaGrad, ("Adagrad", {}), dict(lr=0.1, eps=1e-6)),
    "rmsprop": (optim.RMSProp, ("RMSprop", {}), dict(lr=0.01, alpha=0.95)),
    "adam": (optim.Adam, ("Adam", {}), dict(lr=0.02, betas=(0.8, 0.99), eps=1e-7)),
}
WEIGHT_DECAYS = [0.0, 0.05]


def quadratic(seed=0):
    """(w0, gradient(t, w)): a seeded noisy quadratic in float64."""
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(SHAPE)
    curvature = rng.uniform(0.2, 3.0, SHAPE)
    noise = 0.5 * rng.standard_normal((STEPS,) + SHAPE)
    return w0, lambda t, w: curvature * w + noise[t]


def minidl_trajectory(make_optimizer, seed=0):
    """Weights after each of STEPS steps of an optimizer made by ``make_optimizer([param])``."""
    w0, gradient = quadratic(seed)
    param = Tensor(w0.copy(), requires_grad=True)
    opt = make_optimizer([param])
    path = []
    for t in range(STEPS):
        param.grad = gradient(t, param.data)
        opt.step()
        path.append(param.data.copy())
    return np.array(path)


def torch_trajectory(name, weight_decay, seed=0):
    torch = pytest.importorskip("torch")
    cls_name, fixed = CASES[name][1]
    w0, gradient = quadratic(seed)
    param = torch.tensor(w0.copy(), requires_grad=True)
    opt = getattr(torch.optim, cls_name)(
        [param], weight_decay=weight_decay, **fixed, **CASES[name][2]
    )
    path = []
    for t in range(STEPS):
        param.grad = torch.tensor(gradient(t, param.detach().numpy()))
        opt.step()
        path.append(param.detach().numpy().copy())
    return np.array(path)


def reference_trajectory(name, weight_decay):
    return minidl_trajectory(
        lambda ps: ReferenceOptimizer(ps, name, weight_decay=weight_decay, **CASES[name][2])
    )


@pytest.mark.parametrize("weight_decay", WEIGHT_DECAYS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_follows_the_tuned_optimizer(name, weight_decay):
    tuned_class, _, hyper = CASES[name]
    tuned = minidl_trajectory(lambda ps: tuned_class(ps, weight_decay=weight_decay, **hyper))
    ours = reference_trajectory(name, weight_decay)
    assert np.abs(ours[-1] - ours[0]).max() > 0.1, "the weights barely moved: the test is too weak"
    np.testing.assert_allclose(ours, tuned, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("weight_decay", WEIGHT_DECAYS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_follows_torch_optim(name, weight_decay):
    theirs = torch_trajectory(name, weight_decay)
    np.testing.assert_allclose(
        reference_trajectory(name, weight_decay), theirs, rtol=1e-11, atol=1e-13
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_rules_change_none_of_their_inputs(name):
    rng = np.random.default_rng(3)
    w, g = rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)
    rule, hyper = RULES[name], CASES[name][2]
    _, state = rule(w, g, {}, **hyper)
    saved = [w.copy(), g.copy()] + [np.copy(v) for v in state.values()]
    new_w, new_state = rule(w, g, state, **hyper)
    for before, after in zip(saved, [w, g] + list(state.values())):
        np.testing.assert_array_equal(before, after)
    assert new_w is not w and new_state is not state


@pytest.mark.parametrize("name", sorted(CASES))
def test_rules_run_on_the_device_of_their_arrays(name, device):
    xp = backend.xp_for(device)
    rng = np.random.default_rng(4)
    w, grads = rng.standard_normal(SHAPE), rng.standard_normal((3,) + SHAPE)
    rule, hyper = RULES[name], CASES[name][2]
    w_host, w_dev, state_host, state_dev = w, xp.asarray(w), {}, {}
    for g in grads:
        w_host, state_host = rule(w_host, g, state_host, **hyper)
        w_dev, state_dev = rule(w_dev, xp.asarray(g), state_dev, **hyper)
    assert backend.get_array_module(w_dev) is xp
    np.testing.assert_allclose(backend.to_numpy(w_dev), w_host, rtol=1e-12, atol=1e-14)


def blobs(seed=0, n=120):
    """Three Gaussian clusters in the plane: (float64 inputs, int labels)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    return centres[labels] + 0.6 * rng.standard_normal((n, 2)), labels


def train(make_optimizer, steps=60):
    """(first loss, last loss, accuracy, parameters) of a 2-16-3 MLP trained full batch in
    float64."""
    md_seed = np.random.default_rng(11)
    model = L.Sequential(L.Linear(2, 16), L.Tanh(), L.Linear(16, 3)).to("float64")
    for p in model.parameters():  # the same start for every optimizer
        p.data[...] = 0.5 * md_seed.standard_normal(p.shape)
    x, y = blobs()
    opt = make_optimizer(model.parameters())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(md.tensor(x, dtype="float64")), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with md.no_grad():
        accuracy = float((model(md.tensor(x, dtype="float64")).numpy().argmax(1) == y).mean())
    return losses[0], losses[-1], accuracy, [p.data.copy() for p in model.parameters()]


TRAINING = {
    "sgd": dict(lr=0.5),
    "momentum": dict(lr=0.1, momentum=0.9),
    "nesterov": dict(lr=0.1, momentum=0.9),
    "adagrad": dict(lr=0.3),
    "rmsprop": dict(lr=0.02),
    "adam": dict(lr=0.05),
}


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_reference_optimizer_trains_a_classifier_as_the_tuned_one_does(name):
    hyper = TRAINING[name]
    first, last, accuracy, ours = train(
        lambda ps: ReferenceOptimizer(ps, name, weight_decay=1e-3, **hyper)
    )
    assert last < 0.3 * first and accuracy > 0.95
    tuned_class = CASES[name][0]
    *_, theirs = train(lambda ps: tuned_class(ps, weight_decay=1e-3, **hyper))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_any_function_of_w_g_and_state_is_a_rule():
    def sign_sgd(w, g, state, lr):
        return w - lr * np.sign(g), {"steps": state.get("steps", 0) + 1}

    def frozen(w, g, state, lr):  # hands back the very state it got
        return w, state

    param = Tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    idle = Tensor(np.zeros(2), requires_grad=True)
    opt = ReferenceOptimizer([param, idle], sign_sgd, lr=0.25)
    for _ in range(2):
        param.grad = np.array([3.0, -0.1, 0.0])
        opt.step()
    np.testing.assert_array_equal(param.data, [0.5, -1.5, 0.5])
    assert opt.state == [{"steps": 2}, {}]  # a parameter without a gradient is skipped
    opt.zero_grad()
    assert param.grad is None and idle.grad is None
    opt.rule, param.grad = frozen, np.ones(3)
    opt.step()
    assert opt.state[0] == {"steps": 2}


def test_schedules_and_clipping_of_minidl_optim_drive_the_reference_optimizer():
    param = Tensor(np.zeros(4), requires_grad=True)
    opt = ReferenceOptimizer([param], "sgd", lr=1.0, clip_grad_norm=1.0)
    schedule = optim.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(2):
        param.grad = np.full(4, 10.0)  # norm 20, clipped to 1: each step moves 0.5 * lr
        opt.step()
        schedule.step()
    np.testing.assert_allclose(param.data, -np.full(4, 0.5 * (1.0 + 0.5)), rtol=1e-5)


def test_unknown_rules_and_empty_parameter_lists_are_refused():
    with pytest.raises(ValueError, match="unknown rule 'adamw'.*sgd, momentum"):
        ReferenceOptimizer([Tensor(np.zeros(2), requires_grad=True)], "adamw", lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        ReferenceOptimizer([], "sgd", lr=0.1)
