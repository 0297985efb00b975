"""The six update rules against torch.optim, step by step, plus clipping, state and schedules."""

import math

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim

from ..conftest import relative_error

torch = pytest.importorskip("torch")

# name: (minidl class, kwargs, torch factory)
RULES = {
    "sgd": (optim.SGD, dict(lr=0.1), lambda p, wd: torch.optim.SGD(p, lr=0.1, weight_decay=wd)),
    "momentum": (
        optim.Momentum,
        dict(lr=0.05, momentum=0.9),
        lambda p, wd: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=wd),
    ),
    "nesterov": (
        optim.Nesterov,
        dict(lr=0.05, momentum=0.9),
        lambda p, wd: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=wd),
    ),
    "adagrad": (
        optim.AdaGrad,
        dict(lr=0.05),
        lambda p, wd: torch.optim.Adagrad(p, lr=0.05, weight_decay=wd),
    ),
    "rmsprop": (
        optim.RMSProp,
        dict(lr=0.003),
        lambda p, wd: torch.optim.RMSprop(p, lr=0.003, weight_decay=wd),
    ),
    "adam": (
        optim.Adam,
        dict(lr=0.01),
        lambda p, wd: torch.optim.Adam(p, lr=0.01, weight_decay=wd),
    ),
}


def mlp():
    return L.Sequential(L.Linear(10, 16), L.Tanh(), L.Linear(16, 16), L.ReLU(), L.Linear(16, 3))


def torch_copy(model):
    nn = torch.nn
    net = nn.Sequential(
        nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)
    )
    net.load_state_dict({k: torch.tensor(v.copy()) for k, v in model.state_dict().items()})
    return net


def batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        yield rng.standard_normal((32, 10)).astype(np.float32), rng.integers(0, 3, 32)


def train_minidl(model, opt, data):
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(md.tensor(x)), y).backward()
        opt.step()


def train_torch(net, opt, data):
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.tensor(x)), torch.tensor(y)).backward()
        opt.step()


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("name", list(RULES))
def test_trajectory_matches_torch_over_100_steps(name, weight_decay):
    cls, kwargs, torch_opt = RULES[name]
    md.manual_seed(0)
    model = mlp()
    net = torch_copy(model)
    train_minidl(model, cls(model.parameters(), weight_decay=weight_decay, **kwargs), batches(100))
    train_torch(net, torch_opt(net.parameters(), weight_decay), batches(100))
    start = mlp_state_distance(model, net)
    assert start > 1e-2, "the parameters should have moved"
    for (k, v), t in zip(model.state_dict().items(), net.state_dict().values()):
        assert relative_error(v, t.numpy()) <= 1e-5, f"{name}: {k} drifted from torch.optim"


def mlp_state_distance(model, net):
    """How far training moved the weights from a fresh copy of the same seed."""
    md.manual_seed(0)
    fresh = mlp()
    return relative_error(model.state_dict()["0.weight"], fresh.state_dict()["0.weight"])


def test_clip_grad_norm_matches_torch():
    md.manual_seed(1)
    model = mlp()
    net = torch_copy(model)
    cls, kwargs, torch_opt = RULES["momentum"]
    opt = cls(model.parameters(), clip_grad_norm=0.5, **kwargs)
    topt = torch_opt(net.parameters(), 0.0)
    for x, y in batches(20, seed=3):
        opt.zero_grad()
        F.cross_entropy(model(md.tensor(x * 20)), y).backward()
        opt.step()
        topt.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.tensor(x * 20)), torch.tensor(y)).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        topt.step()
    for v, t in zip(model.state_dict().values(), net.state_dict().values()):
        assert relative_error(v, t.numpy()) <= 1e-5


def test_clip_grad_norm_returns_the_norm_and_leaves_small_gradients_alone():
    p = L.Parameter(np.zeros(4, dtype=np.float32))
    p.grad = np.array([3, 4, 0, 0], dtype=np.float32)
    assert optim.clip_grad_norm_([p], 10.0) == pytest.approx(5.0)
    np.testing.assert_array_equal(p.grad, [3, 4, 0, 0])
    optim.clip_grad_norm_([p], 1.0)
    assert np.linalg.norm(p.grad) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("name", list(RULES))
def test_state_dict_resume_equals_uninterrupted_training(name):
    cls, kwargs, _ = RULES[name]
    md.manual_seed(2)
    straight = mlp()
    resumed = mlp()
    resumed.load_state_dict({k: v.copy() for k, v in straight.state_dict().items()})
    data = list(batches(10, seed=5))
    train_minidl(straight, cls(straight.parameters(), **kwargs), data)
    first = cls(resumed.parameters(), **kwargs)
    train_minidl(resumed, first, data[:5])
    second = cls(resumed.parameters(), **{**kwargs, "lr": 123.0})
    second.load_state_dict(first.state_dict())
    assert second.lr == kwargs["lr"]
    train_minidl(resumed, second, data[5:])
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        np.testing.assert_array_equal(a, b)


def test_load_state_dict_rejects_another_optimizers_state():
    model = mlp()
    adam = optim.Adam(model.parameters())
    with pytest.raises(KeyError, match="betas"):
        optim.SGD(model.parameters(), lr=0.1).load_state_dict(adam.state_dict())


@pytest.mark.parametrize(
    "bad_value,error,message",
    [
        (
            np.zeros((4, 4), dtype=np.float32),
            ValueError,
            r"Adam.load_state_dict: state 'exp_avg_sq' of parameter 5 has shape \(4, 4\) "
            r"in the state but \(3,\) in the parameter; "
            r"build the optimizer over the parameters it had",
        ),
        (
            np.zeros(3, dtype=np.complex64),
            TypeError,
            r"state 'exp_avg_sq' of parameter 5 is complex64 in the state but float32",
        ),
    ],
)
def test_optimizer_load_state_dict_with_a_bad_last_entry_changes_nothing(bad_value, error, message):
    model = mlp()
    saved = optim.Adam(model.parameters(), lr=0.02)
    train_minidl(model, saved, batches(2))
    state = saved.state_dict()
    state["state"][-1]["exp_avg_sq"] = bad_value
    opt = optim.Adam(model.parameters(), lr=0.01)
    train_minidl(model, opt, batches(1, seed=3))
    before = [{k: np.copy(v) for k, v in s.items()} for s in opt.state]
    with pytest.raises(error, match=message):
        opt.load_state_dict(state)
    assert opt.lr == 0.01
    for own, old in zip(opt.state, before):
        assert own.keys() == old.keys()
        for k in old:
            assert np.asarray(own[k]).tobytes() == np.asarray(old[k]).tobytes()


def test_bad_arguments_are_reported():
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="lr=-1"):
        optim.SGD(mlp().parameters(), lr=-1)
    with pytest.raises(TypeError, match="requires_grad"):
        optim.SGD([md.tensor([1.0])], lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam(mlp().parameters(), betas=(0.9, 1.5))


def test_optimizer_keeps_float64_parameters_float64():
    model = mlp().to("float64")
    opt = optim.Adam(model.parameters())
    F.cross_entropy(
        model(md.tensor(np.ones((2, 10)), dtype="float64")), np.array([0, 1])
    ).backward()
    opt.step()
    assert all(p.dtype == np.float64 for p in model.parameters())
    assert all(v.dtype == np.float64 for s in opt.state for v in s.values() if hasattr(v, "dtype"))


def lr_sequence(scheduler, opt, steps):
    lrs = []
    for _ in range(steps):
        lrs.append(opt.lr)
        scheduler.step()
    return lrs


def torch_lrs(make, steps):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_step_lr_matches_torch():
    opt = optim.SGD(mlp().parameters(), lr=0.1)
    np.testing.assert_allclose(
        lr_sequence(optim.StepLR(opt, 3, 0.5), opt, 10),
        torch_lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5), 10),
    )


def test_cosine_matches_torch():
    opt = optim.SGD(mlp().parameters(), lr=0.1)
    np.testing.assert_allclose(
        lr_sequence(optim.CosineAnnealingLR(opt, 8, eta_min=0.01), opt, 9),
        torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 8, eta_min=0.01), 9),
        rtol=1e-6,
    )


def test_linear_warmup_matches_torch_linear_lr_then_hands_over():
    opt = optim.SGD(mlp().parameters(), lr=0.1)
    then = optim.CosineAnnealingLR(opt, 4)
    lrs = lr_sequence(optim.LinearWarmup(opt, 5, start_factor=0.2, then=then), opt, 10)
    np.testing.assert_allclose(
        lrs[:6],
        torch_lrs(lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.2, 1.0, 5), 6),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        lrs[5:], [0.1 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(5)], rtol=1e-6
    )
