"""Module mechanics: registration, state dicts, modes, dtype moves, initialisers."""

import math

import numpy as np
import pytest

import minidl as md
from minidl import layers as L
from minidl.layers import init


class TwoLayer(L.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = L.Linear(4, 6)
        self.bn = L.BatchNorm1d(6)
        self.fc2 = L.Linear(6, 2)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x)).relu())


def test_parameters_are_named_by_path_in_registration_order():
    names = [n for n, _ in TwoLayer().named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"]
    assert [
        n for n, _ in L.Sequential(L.Linear(2, 2), L.ReLU(), L.Linear(2, 1)).named_parameters()
    ] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_shared_parameter_is_listed_once():
    m = L.Sequential(L.Linear(3, 3), L.Linear(3, 3))
    m[1].weight = m[0].weight
    assert len(list(m.parameters())) == 3


def test_state_dict_round_trip_restores_outputs():
    md.manual_seed(0)
    a, b = TwoLayer(), TwoLayer()
    x = md.tensor(np.random.default_rng(0).standard_normal((5, 4)))
    a(x)  # updates a's running statistics
    b.load_state_dict({k: v.copy() for k, v in a.state_dict().items()})
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert "bn.running_mean" in a.state_dict()


def test_load_state_dict_names_a_shape_mismatch():
    state = TwoLayer().state_dict()
    state["fc1.weight"] = np.zeros((6, 5), dtype=np.float32)
    with pytest.raises(ValueError, match=r"fc1.weight has shape \(6, 5\).*\(6, 4\)"):
        TwoLayer().load_state_dict(state)


def test_load_state_dict_names_missing_and_unexpected_keys():
    state = TwoLayer().state_dict()
    state.pop("fc2.bias")
    state["extra"] = np.zeros(1)
    with pytest.raises(KeyError, match=r"missing keys \['fc2.bias'\].*unexpected keys \['extra'\]"):
        TwoLayer().load_state_dict(state)
    TwoLayer().load_state_dict(state, strict=False)


def snapshot(module):
    return {k: v.copy() for k, v in module.state_dict().items()}


def assert_unchanged(module, before):
    after = module.state_dict()
    assert after.keys() == before.keys()
    for k in before:
        assert after[k].dtype == before[k].dtype and after[k].tobytes() == before[k].tobytes(), k


@pytest.mark.parametrize(
    "bad_value,error,message",
    [
        (
            np.zeros(3),
            ValueError,
            r"load_state_dict: bn.num_batches_tracked has shape \(3,\) in the state "
            r"but \(\) in the model; build the model with the layer sizes",
        ),
        (
            np.array(2.5),
            TypeError,
            r"load_state_dict: bn.num_batches_tracked is float64 in the state "
            r"but int64 in the model.*store it as int64",
        ),
    ],
)
def test_load_state_dict_with_a_bad_last_key_changes_nothing(bad_value, error, message):
    model, other = TwoLayer(), TwoLayer()
    other(md.tensor(np.random.default_rng(0).standard_normal((5, 4))))  # running statistics move
    state = snapshot(other)
    assert list(state)[-1] == "bn.num_batches_tracked"
    state["bn.num_batches_tracked"] = bad_value
    before = snapshot(model)
    with pytest.raises(error, match=message):
        model.load_state_dict(state)
    assert_unchanged(model, before)


def test_load_state_dict_converts_within_a_kind():
    model, other = TwoLayer(), TwoLayer().to("float64")
    model.load_state_dict(other.state_dict())
    for k, v in model.state_dict().items():
        assert v.dtype == (np.int64 if k.endswith("num_batches_tracked") else np.float32), k
        np.testing.assert_array_equal(v, other.state_dict()[k].astype(v.dtype))


def test_train_eval_propagate_to_children():
    m = TwoLayer().eval()
    assert not m.bn.training and not m.training
    assert all(sub.training for sub in m.train().modules())


def test_to_float64_converts_parameters_and_buffers_not_counters():
    m = TwoLayer().to("float64")
    assert all(p.dtype == np.float64 for p in m.parameters())
    assert m.bn.running_mean.dtype == np.float64
    assert m.bn.num_batches_tracked.dtype == np.int64
    out = m(md.tensor(np.ones((3, 4)), dtype="float64"))
    assert out.dtype == np.float64


def test_zero_grad_clears_gradients():
    m = TwoLayer()
    m(md.tensor(np.ones((3, 4)))).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_num_parameters():
    assert TwoLayer().num_parameters() == 4 * 6 + 6 + 6 + 6 + 6 * 2 + 2


def test_module_without_super_init_gets_a_clear_error():
    class Broken(L.Module):
        def __init__(self):
            self.fc = L.Linear(1, 1)

    with pytest.raises(AttributeError, match="super"):
        Broken()


def test_default_linear_init_bounds():
    md.manual_seed(1)
    layer = L.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound
    assert np.abs(layer.bias.numpy()).max() <= bound


@pytest.mark.parametrize(
    "fn,expected_std",
    [
        (init.xavier_uniform_, math.sqrt(2 / (200 + 100))),
        (init.xavier_normal_, math.sqrt(2 / (200 + 100))),
        (init.he_uniform_, math.sqrt(2 / 200)),
        (init.he_normal_, math.sqrt(2 / 200)),
    ],
)
def test_initialiser_variances(fn, expected_std):
    md.manual_seed(2)
    w = L.Parameter(np.empty((100, 200), dtype=np.float32))
    fn(w)
    assert abs(w.numpy().std() / expected_std - 1) < 0.02
    assert abs(w.numpy().mean()) < 0.05 * expected_std * 10


def test_initialisation_is_reproducible_with_a_seed():
    md.manual_seed(3)
    a = L.Linear(5, 5).weight.numpy().copy()
    md.manual_seed(3)
    b = L.Linear(5, 5).weight.numpy()
    np.testing.assert_array_equal(a, b)


def test_random_state_save_and_restore():
    md.manual_seed(4)
    state = md.random.get_state()
    a = md.random.get_rng().random(3)
    md.random.set_state(state)
    np.testing.assert_array_equal(a, md.random.get_rng().random(3))
