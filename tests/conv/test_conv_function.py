"""conv2d as an op: numerical gradients, F.conv2d and L.Conv2d, errors, the autotuner."""

import numpy as np
import pytest

import minidl as md
import minidl.reference  # registers the textbook algorithms, tested here too
from minidl import functional as F
from minidl import layers as L
from minidl.conv.autotune import TUNER
from minidl.conv.registry import AUTO_CANDIDATES, IMPLEMENTATIONS
from minidl.conv.winograd import winograd_matrices

from . import reference


@pytest.fixture
def fresh_tuner():
    """A tuner with tuning on, an empty cache and no limit; restored afterwards."""
    saved = (TUNER.enabled, TUNER.workspace_limit, TUNER.repeats, dict(TUNER.choices))
    TUNER.configure(enabled=True, workspace_limit=None, repeats=1)
    yield TUNER
    TUNER.enabled, TUNER.workspace_limit, TUNER.repeats = saved[:3]
    TUNER.choices.clear()
    TUNER.choices.update(saved[3])


@pytest.mark.parametrize("algo", tuple(IMPLEMENTATIONS) + ("auto",))
@pytest.mark.parametrize(
    "params",
    [
        dict(stride=1, padding=1),
        dict(stride=2, padding=1),
        dict(padding=2, dilation=2),
        dict(padding=1, groups=2),
        dict(stride=2, padding=2, kernel=5),
    ],
)
def test_gradcheck_float64(algo, params, rng):
    params = dict(params)
    kernel = params.pop("kernel", 3)
    if algo.startswith("winograd") and md.conv.implementation(algo).unsupported(
        md.conv.make_geometry(
            (2, 4, 7, 6), (4, 4 // params.get("groups", 1), kernel, kernel), **params
        )
    ):
        pytest.skip("Winograd: 3 taps per stride phase, dilation 1 only")
    x = md.tensor(rng.standard_normal((2, 4, 7, 6)), requires_grad=True, dtype="float64")
    w = md.tensor(
        rng.standard_normal((4, 4 // params.get("groups", 1), kernel, kernel)),
        requires_grad=True,
        dtype="float64",
    )
    b = md.tensor(rng.standard_normal(4), requires_grad=True, dtype="float64")
    assert md.gradcheck(lambda x, w, b: F.conv2d(x, w, b, algo=algo, **params), x, w, b)


def test_layer_matches_torch_module(rng):
    torch = pytest.importorskip("torch")
    from ..conftest import compare_with_torch

    mine = L.Conv2d(4, 6, (3, 5), stride=(2, 1), padding=(1, 2), groups=2)
    theirs = torch.nn.Conv2d(4, 6, (3, 5), stride=(2, 1), padding=(1, 2), groups=2)
    theirs.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in mine.state_dict().items()})
    compare_with_torch(mine, theirs, [rng.standard_normal((2, 4, 9, 8)).astype(np.float32)])
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad, q.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=name)


def test_layer_default_initialisation_follows_pytorch():
    """He-uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)) for weight and bias, fan_in = C/g*KH*KW."""
    md.manual_seed(0)
    layer = L.Conv2d(64, 128, 3, groups=2)
    bound = 1 / np.sqrt(32 * 9)
    assert layer.weight.shape == (128, 32, 3, 3)
    for p in (layer.weight.data, layer.bias.data):
        assert np.abs(p).max() <= bound
        assert np.abs(p).max() > 0.95 * bound  # uniform over the whole interval
    assert abs(layer.weight.data.std() - bound / np.sqrt(3)) < 0.02 * bound


def test_slide_worked_example():
    """The 3x3 example of Dryden's lecture "Parallelism in Training Deep Neural Networks"
    on a 4x4 crop: the 10 outputs that do not see beyond the crop."""
    x = np.array([[4, 1, 9, 8], [5, 9, 9, 8], [0, 7, 3, 4], [2, 6, 3, 1]], np.float64)
    w = np.array([[1, -1, 0], [0.1, -2, 0], [3, 4, 1.1]])
    expected = np.array(
        [[21.9, 59.3, 53.9, 43.9], [-6.3, 16.8, 12.3, np.nan], [9.6, 15.3, 25.8, np.nan]]
    )
    for algo in IMPLEMENTATIONS:
        y = F.conv2d(
            md.tensor(x[None, None], dtype="float64"),
            md.tensor(w[None, None], dtype="float64"),
            padding=1,
            algo=algo,
        ).numpy()[0, 0, :3]
        known = ~np.isnan(expected)
        np.testing.assert_allclose(y[known], expected[known], atol=1e-9, err_msg=algo)


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_matrices_compute_1d_correlation(m):
    """A^T [(G g) o (B^T d)] = the m outputs of correlating d (m+2 samples) with g (3 taps)."""
    bt, g, at = winograd_matrices(m)
    rng = np.random.default_rng(m)
    for _ in range(10):
        d, taps = rng.standard_normal(m + 2), rng.standard_normal(3)
        np.testing.assert_allclose(
            at @ ((g @ taps) * (bt @ d)),
            [d[i : i + 3] @ taps for i in range(m)],
            rtol=1e-12,
            atol=1e-12,
        )


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "algo,params,words",
    [
        (
            "winograd",
            dict(stride=2),
            ["winograd", "stride (2, 2)", "'direct'", "'im2col'", "'fft'"],
        ),
        ("winograd_f2x2_3x3", dict(dilation=2, padding=2), ["dilation (2, 2)", "'im2col'"]),
    ],
)
def test_unsupported_case_names_algorithm_case_and_alternatives(algo, params, words):
    x, w = md.tensor(np.zeros((1, 2, 8, 8))), md.tensor(np.zeros((2, 2, 3, 3)))
    with pytest.raises(md.conv.Unsupported) as err:
        F.conv2d(x, w, algo=algo, **params)
    for word in words:
        assert word in str(err.value)
    assert "winograd" not in str(err.value).split("use ")[1]


def test_unsupported_kernel_size():
    x, w = md.tensor(np.zeros((1, 2, 8, 8))), md.tensor(np.zeros((2, 2, 5, 5)))
    with pytest.raises(md.conv.Unsupported, match="5x5 kernel.*3x3 only"):
        F.conv2d(x, w, algo="winograd_f4x4_3x3")


@pytest.mark.parametrize(
    "x_shape,w_shape,kwargs,match",
    [
        (
            (1, 3, 8, 8),
            (4, 2, 3, 3),
            {},
            r"expects 2\*groups=2 input channels but the input \(1, 3, 8, 8\) has 3",
        ),
        ((1, 4, 8, 8), (3, 2, 3, 3), dict(groups=2), "out_channels 3 .* not divisible by groups=2"),
        ((3, 8, 8), (4, 3, 3, 3), {}, "input must be 4-D"),
        ((1, 3, 2, 2), (4, 3, 3, 3), {}, "smaller than the dilated kernel"),
        ((1, 3, 8, 8), (4, 3, 3, 3), dict(algo="gemm"), "unknown algo 'gemm'"),
        ((1, 3, 8, 8), (4, 3, 3, 3), dict(stride=0), "stride"),
    ],
)
def test_bad_arguments_are_named(x_shape, w_shape, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        F.conv2d(md.tensor(np.zeros(x_shape)), md.tensor(np.zeros(w_shape)), **kwargs)


def test_bias_and_dtype_mismatch():
    x, w = md.tensor(np.zeros((1, 3, 8, 8))), md.tensor(np.zeros((4, 3, 3, 3)))
    with pytest.raises(ValueError, match="bias shape"):
        F.conv2d(x, w, md.tensor(np.zeros(3)))
    with pytest.raises(TypeError, match="share a dtype"):
        F.conv2d(x, md.tensor(np.zeros((4, 3, 3, 3)), dtype="float64"))


# ------------------------------------------------------------- autotuner
def test_auto_picks_only_applicable_algorithms_and_caches_per_key(fresh_tuner, rng):
    x = md.tensor(rng.standard_normal((2, 3, 10, 10)), requires_grad=True)
    w = md.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    F.conv2d(x, w, stride=2, padding=1).sum().backward()
    keys = list(fresh_tuner.choices)
    assert sorted(k[3] for k in keys) == ["backward_input", "backward_weight", "forward"]
    for key, choice in fresh_tuner.choices.items():
        assert set(choice.seconds) == {"direct", "im2col", "fft"}, key  # no Winograd at stride 2
        assert choice.algorithm == min(choice.seconds, key=choice.seconds.get)
    before = {k: id(v) for k, v in fresh_tuner.choices.items()}
    F.conv2d(x, w, stride=2, padding=1).sum().backward()  # same key: no new tuning
    assert {k: id(v) for k, v in fresh_tuner.choices.items()} == before
    F.conv2d(x, w, stride=1, padding=1)  # new key: Winograd competes
    (new,) = [c for k, c in fresh_tuner.choices.items() if k not in before]
    assert set(new.seconds) == set(AUTO_CANDIDATES)  # the *_reference ones only by name


def test_auto_result_is_correct(fresh_tuner, rng):
    x = rng.standard_normal((2, 5, 9, 9)).astype(np.float32)
    w = rng.standard_normal((3, 5, 3, 3)).astype(np.float32)
    y = F.conv2d(md.tensor(x), md.tensor(w), padding=1)
    assert np.abs(y.numpy() - reference.conv2d(x, w, padding=(1, 1))).max() < 1e-4


def test_workspace_limit_excludes_algorithms(fresh_tuner, rng):
    geom = md.conv.make_geometry((4, 8, 16, 16), (8, 8, 3, 3), padding=1)
    needs = {n: IMPLEMENTATIONS[n].workspace_bytes(geom, "forward") for n in AUTO_CANDIDATES}
    limit = sorted(needs.values())[1]  # only the two leanest fit
    fresh_tuner.configure(workspace_limit=limit)
    F.conv2d(
        md.tensor(rng.standard_normal((4, 8, 16, 16))),
        md.tensor(rng.standard_normal((8, 8, 3, 3))),
        padding=1,
    )
    (choice,) = fresh_tuner.choices.values()
    assert set(choice.seconds) == {n for n, b in needs.items() if b <= limit}
    assert set(choice.excluded) == {n for n, b in needs.items() if b > limit}
    assert "not a candidate: workspace" in md.conv.report()


@pytest.mark.parametrize(
    "channels, kernel, expected",
    [
        ((3, 4), 3, "im2col"),  # too few channels for Winograd's transforms to pay
        ((16, 32), 3, "winograd_f4x4_3x3"),  # 3x3 with channels: F(4x4, 3x3)
        ((32, 32), 5, "im2col"),  # Winograd does not apply to 5x5
    ],
)
def test_the_default_rule_picks_without_timing(fresh_tuner, rng, channels, kernel, expected):
    fresh_tuner.configure(enabled=False)
    layer = L.Conv2d(*channels, kernel, padding=1)
    x = md.tensor(rng.standard_normal((2, channels[0], 8, 8)).astype(np.float32))
    layer(x).sum().backward()
    assert layer.algorithms() == {
        "forward": expected,
        "backward_input": None,
        "backward_weight": expected,
    }
    assert all(not c.seconds for c in fresh_tuner.choices.values())


def test_report_names_layers_choices_and_timings(fresh_tuner, rng):
    net = L.Sequential(L.Conv2d(1, 4, 5, padding=2), L.ReLU(), L.Conv2d(4, 6, 3, algo="auto"))
    x = md.tensor(rng.standard_normal((2, 1, 12, 12)).astype(np.float32))
    net(x).sum().backward()
    text = md.conv.report()
    for layer in (net[0], net[2]):
        assert layer._label in text
        for name in layer.algorithms().values():
            if name is not None:
                assert name in text
    assert text.count(" ms") >= 2 * 3  # every candidate's time is listed
    assert "backward_input" in text  # the second layer's input gradient was tuned
    by_path = md.conv.report(net)
    first, second = by_path.index("[layers: 0]"), by_path.index("[layers: 2]")
    assert first < second  # in the model's order, named by path
    assert by_path.count("[layers:") == 2 + 3  # conv 0: forward + weight gradient; conv 2: all


def test_environment_configures_the_tuner(monkeypatch):
    from minidl.conv.autotune import Autotuner

    monkeypatch.setenv("MINIDL_CONV_AUTOTUNE", "0")
    monkeypatch.setenv("MINIDL_CONV_WORKSPACE_MB", "1.5")
    tuner = Autotuner()
    assert not tuner.enabled and tuner.workspace_limit == 1.5 * 2**20
    monkeypatch.setenv("MINIDL_CONV_WORKSPACE_MB", "none")
    assert Autotuner().workspace_limit is None
    monkeypatch.delenv("MINIDL_CONV_WORKSPACE_MB")
    monkeypatch.setenv("MINIDL_CONV_AUTOTUNE", "1")
    assert Autotuner().enabled
    monkeypatch.delenv("MINIDL_CONV_AUTOTUNE")
    assert not Autotuner().enabled and Autotuner().workspace_limit == 1024 * 2**20
