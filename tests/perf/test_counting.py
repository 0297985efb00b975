"""Parameter, MAC, FLOP, work and depth counts against Ben-Nun & Hoefler's numbers and PyTorch.

Oracles: Ben-Nun & Hoefler's LeNet example (2019, §3.3.1: W = 665,832, D = 41
and its per-layer terms), the AlexNet parameter and MAC counts derived layer
by layer from Krizhevsky et al. 2012 and the torchvision architecture,
PyTorch's FLOP counter on the same architectures (meta tensors: shapes
only, nothing is computed), and shapes from real minidl forward passes.
"""

import numpy as np
import pytest

import minidl as md
from minidl import layers as L
from minidl import models
from minidl.perf import Counter, count_model, register
from minidl.perf.counters import ShapeMismatch
from minidl.perf.instrument import wrapped_forwards
from minidl.perf.summary import format_summary, summarize
from minidl.perf.zoo import build_named

LENET_PARAMS = 156 + 2_416 + 48_120 + 10_164 + 850  # Ben-Nun & Hoefler 2019, §3.3.1 layer by layer
ALEXNET_ORIGINAL_MACS = {
    "0": 105_415_200,
    "4": 223_948_800,
    "8": 149_520_384,
    "10": 112_140_288,
    "12": 74_760_192,
    "17": 37_748_736,
    "20": 16_777_216,
    "22": 4_096_000,
}  # notes §3.2, per layer


def counted(costs, field):
    """{layer name: value} of the layers where ``field`` is not zero."""
    return {layer.name: getattr(layer, field) for layer in costs.layers if getattr(layer, field)}


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize(
    "name, expected",
    [
        ("lenet5", 61_706),
        ("alexnet-original", 60_965_224),
        ("alexnet-torchvision", 61_100_840),
        ("alexnet", 61_100_840),
    ],
)
def test_parameter_totals(name, expected):
    costs = summarize(name)
    assert costs.total("params") == costs.num_parameters == expected


def test_lenet_parameters_layer_by_layer():
    costs = summarize("lenet5")
    assert list(counted(costs, "params").values()) == [156, 2_416, 48_120, 10_164, 850]
    assert sum(counted(costs, "params").values()) == LENET_PARAMS


# ------------------------------------------------------------------ MACs
def test_alexnet_original_macs_per_227_image():
    costs = summarize("alexnet-original")
    assert counted(costs, "macs") == ALEXNET_ORIGINAL_MACS
    assert costs.total("macs") == 724_406_816 == sum(ALEXNET_ORIGINAL_MACS.values())


def test_counts_scale_with_the_batch_but_forward_depth_does_not():
    one, many = summarize("lenet5", batch=1), summarize("lenet5", batch=64)
    for field in ("macs", "forward_flops", "work", "activation_bytes"):
        assert many.total(field) == 64 * one.total(field)
    assert many.total("depth") == one.total("depth")
    assert many.total("backward_depth") > one.total(
        "backward_depth"
    )  # weight gradients reduce over N


def test_activation_memory_is_the_output_size():
    costs = summarize("lenet5", batch=8)
    first = costs.layers[0]
    assert first.output_shape == (8, 6, 28, 28)
    assert first.activation_bytes == 8 * 6 * 28 * 28 * 4


# ------------------------------------------------------- Ben-Nun & Hoefler's work and depth
def test_lenet_paper_convention_reproduces_the_survey_example():
    costs = summarize("lenet5", convention="paper")
    assert list(counted(costs, "work").values()) == [
        117_600,
        14_112,
        470_400,
        4_800,
        48_000,
        10_080,
        840,
    ]
    assert list(counted(costs, "depth").values()) == [5, 2, 9, 2, 9, 7, 7]
    assert costs.total("work") == 665_832 and costs.total("depth") == 41


def test_lenet_corrected_convention_counts_every_layer_at_its_output():
    costs = summarize("lenet5")
    relu = 6 * 14 * 14 + 16 * 5 * 5 + 120 + 84  # the activations follow the pooling layers
    expected_work = (
        28 * 28 * 6 * (1 * 5 * 5)  # conv1 at its 28x28 output
        + 14 * 14 * 6 * (2 * 2 - 1)  # pool1: 3 comparisons per output
        + 10 * 10 * 16 * (6 * 5 * 5)  # conv2 at its 10x10 output (not 14x14)
        + 5 * 5 * 16 * 3
        + 400 * 120
        + 120 * 84
        + 84 * 10
        + relu
    )
    assert costs.total("work") == expected_work == 423_028
    # Table 6 for both convolutions (conv1: 0 + 3 + 3), Table 4 for the rest, ReLUs depth 1
    assert [layer.depth for layer in costs.layers] == [6, 2, 1, 9, 2, 1, 0, 9, 1, 7, 1, 7]


# ------------------------------------------------------------------ against PyTorch
def to_torch(model):
    """The same architecture as torch modules on the meta device (shapes, no data)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    out = []
    for m in model:
        kind = type(m).__name__
        if kind == "Conv2d":
            out.append(
                nn.Conv2d(
                    m.in_channels,
                    m.out_channels,
                    m.kernel_size,
                    m.stride,
                    m.padding,
                    m.dilation,
                    m.groups,
                    device="meta",
                )
            )
        elif kind == "Linear":
            out.append(nn.Linear(m.in_features, m.out_features, device="meta"))
        elif kind == "MaxPool2d":
            out.append(nn.MaxPool2d(m.kernel_size, m.stride, m.padding))
        elif kind == "LocalResponseNorm":
            out.append(nn.LocalResponseNorm(m.size, m.alpha, m.beta, m.k))
        else:
            out.append({"ReLU": nn.ReLU, "Flatten": nn.Flatten, "Dropout": nn.Dropout}[kind]())
    return nn.Sequential(*out)


@pytest.mark.parametrize("name", ["lenet5", "alexnet-original", "alexnet-torchvision"])
def test_flops_of_products_match_pytorch_forward_and_backward(name):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    model, shape = build_named(name)
    costs = count_model(model, shape, batch=2)
    net = to_torch(model)
    x = torch.zeros((2,) + shape, device="meta")

    def flops_per_layer(backward):
        with FlopCounterMode(display=False) as counter:
            y = net(x)
            if backward:
                y.sum().backward()
        return {
            key.split(".", 1)[1]: sum(ops.values())
            for key, ops in counter.get_flop_counts().items()
            if key.startswith("Sequential.")
        }

    forward, both = flops_per_layer(False), flops_per_layer(True)
    backward = {k: v - forward.get(k, 0) for k, v in both.items() if v - forward.get(k, 0)}
    assert forward == {k: 2 * v for k, v in counted(costs, "macs").items()}
    # PyTorch's counter ignores groups in a convolution's weight gradient (its
    # conv_backward_flop says so), counting g times the per-group products;
    # test_grouped_convolution_matches_its_per_group_gemms checks ours.
    groups = {name: getattr(m, "groups", 1) for name, m in model.named_modules()}
    expected = {
        layer.name: 2 * (layer.backward_macs + (groups[layer.name] - 1) * layer.macs)
        for layer in costs.layers
        if layer.backward_macs
    }
    assert backward == expected


def test_grouped_convolution_matches_its_per_group_gemms():
    """im2col per group: W_g (K/g x C/g*kh*kw) times columns (C/g*kh*kw x N*H'*W'), g times."""
    conv = L.Conv2d(96, 256, 5, padding=2, groups=2)
    model = L.Sequential(L.Conv2d(96, 96, 1), conv)  # so that conv's input needs a gradient
    n, h_out = 3, 27
    layer = count_model(model, (96, 27, 27), batch=n).layers[1]
    g, m_rows, k_inner, n_cols = 2, 256 // 2, 96 // 2 * 5 * 5, n * h_out * h_out
    per_pass = g * m_rows * k_inner * n_cols  # forward, dW = dY X^T and dX = W^T dY alike
    assert layer.macs == per_pass and layer.backward_macs == 2 * per_pass


def test_shapes_match_a_real_forward_pass():
    model = models.alexnet(num_classes=10, variant="small", in_channels=1)
    costs = count_model(model, (1, 28, 28), batch=3)
    seen = {}

    def make(name, module, original):
        def forward(x):
            y = original(x)
            seen[name] = (x.shape, y.shape)
            return y

        return forward

    with wrapped_forwards(model, make), md.no_grad():
        model(md.tensor(np.zeros((3, 1, 28, 28))))
    assert {layer.name: (layer.input_shape, layer.output_shape) for layer in costs.layers} == seen


# ------------------------------------------------------------------ generic walking
class Doubler(L.Module):
    """A leaf type no counter knows."""

    def forward(self, x):
        return x * 2.0


class Branches(L.Module):
    """A container whose own forward combines two branches (no Sequential)."""

    def __init__(self):
        super().__init__()
        self.left, self.right = L.Linear(4, 3), L.Linear(4, 5)

    def forward(self, x):
        return md.functional.concatenate([self.left(x), self.right(x)], axis=1)


def test_unknown_layers_run_for_real_and_are_reported():
    model = L.Sequential(L.Linear(6, 4), Doubler(), L.Linear(4, 2))
    costs = count_model(model, (6,), batch=5)
    doubler = costs.layers[1]
    assert not doubler.counted and doubler.output_shape == (5, 4) and doubler.forward_flops == 0
    assert costs.layers[2].macs == 5 * 4 * 2
    assert "Doubler" in format_summary(costs)


def test_a_registered_counter_is_used_and_containers_are_walked():
    @register("Doubler")
    class DoublerCounter(Counter):
        def count(self, m, x_shape, y_shape, needs_input_grad, convention):
            return dict(forward_flops=int(np.prod(x_shape)), work=int(np.prod(x_shape)), depth=1)

    try:
        model = L.Sequential(Branches(), Doubler())
        costs = count_model(model, (4,), batch=2)
    finally:
        from minidl.perf.costs import COUNTERS

        del COUNTERS["Doubler"]
    assert [layer.name for layer in costs.layers] == ["0.left", "0.right", "1"]
    assert costs.layers[2].input_shape == (2, 8) and costs.layers[2].forward_flops == 16
    assert costs.total("params") == 4 * 3 + 3 + 4 * 5 + 5


def test_first_layer_has_no_input_gradient():
    costs = count_model(L.Sequential(L.Linear(3, 4), L.Linear(4, 2)), (3,), batch=1)
    first, second = costs.layers
    assert first.backward_macs == first.macs  # weight gradient only
    assert second.backward_macs == 2 * second.macs  # weight and input gradients


def test_wrong_input_shape_names_the_layer():
    with pytest.raises(ShapeMismatch, match=r"Conv2d\(1, 6\).*\(1, 3, 28, 28\)"):
        count_model(models.lenet5(), (3, 28, 28))
    with pytest.raises(ShapeMismatch, match="smaller than the kernel"):
        summarize("lenet5", input_shape=(1, 8, 8))


def test_unknown_convention_is_rejected():
    with pytest.raises(ValueError, match="corrected, paper"):
        summarize("lenet5", convention="survey")
