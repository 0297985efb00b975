"""ResNet-18/50/20 (He et al. 2016): parameter counts, the block's gradients, global average
pooling, and ResNet-18 against the same network written in PyTorch."""

import types

import numpy as np
import pytest

import minidl as md
from minidl import layers as L
from minidl import models
from minidl.dist.tensor import PlacementError, TensorParallel
from minidl.models.resnet import BasicBlock, Bottleneck
from minidl.perf.model_costs import count_model
from minidl_app.cli import main


@pytest.mark.parametrize(
    "name, classes, channels, count",
    [
        ("resnet18", 1000, 3, 11_689_512),  # torchvision's counts
        ("resnet50", 1000, 3, 25_557_032),
        ("resnet20", 10, 3, 272_474),  # option B: option A's 269,722 + 2 x (1x1 conv + BN)
        ("resnet20", 10, 1, 272_186),  # 2 x 144 fewer stem weights for grey images
    ],
)
def test_parameter_counts(name, classes, channels, count):
    assert models.build(name, classes, channels).num_parameters() == count


def test_every_block_is_one_top_level_module():
    model = models.resnet20()
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU"] + ["BasicBlock"] * 9 + [
        "GlobalAvgPool2d",
        "Flatten",
        "Linear",
    ]
    assert [m.downsample is not None for m in model[3:12]] == [0, 0, 0, 1, 0, 0, 1, 0, 0]


@pytest.mark.parametrize(
    "block, cin, planes, stride",
    [(BasicBlock, 3, 4, 2), (BasicBlock, 4, 4, 1), (Bottleneck, 4, 2, 2)],
)
def test_residual_block_gradients(block, cin, planes, stride):
    md.random.manual_seed(0)
    layer = block(cin, planes, stride).to("float64")
    x = md.tensor(
        np.random.default_rng(1).normal(size=(2, cin, 5, 5)), requires_grad=True, dtype="float64"
    )
    assert md.gradcheck(lambda x, *params: layer(x), x, *layer.parameters())


def test_global_average_pool_gradient_and_refusal():
    x = md.tensor(
        np.random.default_rng(2).normal(size=(2, 3, 4, 5)), requires_grad=True, dtype="float64"
    )
    pool = L.GlobalAvgPool2d()
    np.testing.assert_allclose(pool(x).data[..., 0, 0], x.data.mean(axis=(2, 3)), rtol=1e-12)
    assert md.gradcheck(pool, x)
    with pytest.raises(md.autograd.ShapeError, match="expected an \\(N, C, H, W\\) input"):
        pool(md.tensor(np.zeros((2, 3))))


def _torch_resnet18(nn, classes):
    """torchvision's ResNet-18, written out in torch.nn (registration order as torchvision's)."""

    class Block(nn.Module):
        def __init__(self, cin, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or cin != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )

        def forward(self, x):
            shortcut = x if self.downsample is None else self.downsample(x)
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + shortcut)

    stages, cin = [], 64
    for i, planes in enumerate((64, 128, 256, 512)):
        stride = 1 if i == 0 else 2
        stages.append(nn.Sequential(Block(cin, planes, stride), Block(planes, planes, 1)))
        cin = planes
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *stages,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(512, classes),
    )


def test_resnet18_against_pytorch():
    torch = pytest.importorskip("torch")
    md.random.manual_seed(3)
    mine, theirs = models.resnet18(7), _torch_resnet18(torch.nn, 7)
    rng = np.random.default_rng(3)
    pairs = list(zip(mine.named_parameters(), theirs.named_parameters(), strict=True))
    pairs += list(zip(mine.named_buffers(), theirs.named_buffers(), strict=True))
    with torch.no_grad():
        for (name, a), (other, b) in pairs:
            assert a.shape == tuple(b.shape), (name, other)
            if name.endswith("running_var"):  # non-trivial statistics for the eval pass
                a.data[...] = rng.uniform(0.5, 2.0, a.shape)
            elif name.endswith("running_mean"):
                a.data[...] = rng.normal(0, 0.1, a.shape)
            b.copy_(torch.from_numpy(np.array(a.data)))
    x = rng.normal(size=(2, 3, 40, 40)).astype("float32")
    for train in (True, False):
        mine.train(train), theirs.train(train)
        y, ref = mine(md.tensor(x, requires_grad=True)), theirs(torch.from_numpy(x))
        np.testing.assert_allclose(y.data, ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    y.sum().backward(), ref.sum().backward()
    for (name, a), (_, b) in pairs[: len(list(mine.parameters()))]:
        np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("name, gmacs", [("resnet18", 1.81), ("resnet50", 4.09)])
def test_counted_multiply_accumulates_are_torchvisions(name, gmacs):
    costs = count_model(models.build(name, 1000, 3), (3, 224, 224))
    assert round(costs.total("macs") / 1e9, 2) == gmacs  # torchvision's "GFLOPS" (MACs)
    assert costs.num_parameters == sum(layer.params for layer in costs.layers)


def test_a_blocks_add_and_global_pool_are_counted(capsys):
    costs = count_model(models.resnet20(), (1, 28, 28), batch=2)
    blocks = [layer for layer in costs.layers if layer.kind == "BasicBlock"]
    assert len(blocks) == 9 and not costs.uncounted
    assert blocks[3].output_shape == (2, 32, 14, 14)  # the first block of stage 2
    assert blocks[3].forward_flops == 2 * 32 * 14 * 14  # one add per output
    assert blocks[3].backward_flops == 2 * 16 * 28 * 28  # one per input: the branches meet
    pool = next(layer for layer in costs.layers if layer.kind == "GlobalAvgPool2d")
    assert pool.forward_flops == 2 * 64 * 7 * 7
    assert main(["summary", "--model", "resnet20"]) == 0
    assert "memory per rank: not predicted for resnet20" in capsys.readouterr().out


def test_the_tensor_parallel_placement_refuses_a_residual_block():
    group = types.SimpleNamespace(size=2, rank=0)
    with pytest.raises(PlacementError, match="layer 3 \\(BasicBlock\\) runs its layers in a "):
        TensorParallel(models.resnet20(), group)
