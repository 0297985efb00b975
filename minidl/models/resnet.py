"""Residual networks (He et al. 2016): ResNet-18 and ResNet-50 in torchvision's layout, and
the CIFAR-style ResNet-20 of the paper's §4.2.

A residual block computes ``relu(F(x) + shortcut(x))``: F is two 3x3 convolutions
(``BasicBlock``) or 1x1, 3x3, 1x1 (``Bottleneck``, 4x wider out), each followed by batch
norm; the shortcut is the identity, or a 1x1 convolution + batch norm where the block
changes the width or the stride (the paper's option B). As torchvision ("v1.5"), a
Bottleneck strides on its 3x3 convolution. Parameter counts at 1000 classes: ResNet-18
11,689,512, ResNet-50 25,557,032 (torchvision's). ResNet-20 (3 stages of 3 basic blocks at
16/32/64 channels, 3x3 stem, no max pooling; the paper's "0.27M") uses option B here: 272,474
parameters for 3x32x32 inputs and 10 classes (272,186 for 1 channel), 2,752 more than the
parameter-free option A's 269,722.

Every model is a ``Sequential`` of top-level modules (stem layers, one module per block,
pooling, flatten, fc) so that pipeline stages and recomputation segments cut at whole blocks.
"""

from .. import layers as L
from .activations import activation_layer


def _conv_bn(cin, cout, kernel, stride, conv_algo):
    """A bias-free convolution ("same" padding) and its batch norm."""
    conv = L.Conv2d(
        cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False, algo=conv_algo
    )
    return conv, L.BatchNorm2d(cout)


class _Residual(L.Module):
    """``relu(F(x) + shortcut(x))``; subclasses build F and call ``_shortcut``."""

    def _shortcut(self, cin, cout, stride, conv_algo):
        """Option B: a 1x1 convolution + batch norm where the shape changes, else the identity."""
        if stride == 1 and cin == cout:
            self.downsample = None
        else:
            self.downsample = L.Sequential(*_conv_bn(cin, cout, 1, stride, conv_algo))

    def residual(self, x):
        raise NotImplementedError(f"{type(self).__name__}.residual")

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(self.residual(x) + shortcut)


class BasicBlock(_Residual):
    """F = conv3x3(stride) -> BN -> ReLU -> conv3x3 -> BN (He et al. 2016, Fig. 2)."""

    expansion = 1

    def __init__(self, cin, planes, stride=1, conv_algo="auto", act=L.ReLU):
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, planes, 3, stride, conv_algo)
        self.relu = act()
        self.conv2, self.bn2 = _conv_bn(planes, planes, 3, 1, conv_algo)
        self._shortcut(cin, planes, stride, conv_algo)

    def residual(self, x):
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))


class Bottleneck(_Residual):
    """F = conv1x1 -> BN -> ReLU -> conv3x3(stride) -> BN -> ReLU -> conv1x1 (4x planes) -> BN
    (He et al. 2016, Fig. 5; the stride on the 3x3 convolution as torchvision)."""

    expansion = 4

    def __init__(self, cin, planes, stride=1, conv_algo="auto", act=L.ReLU):
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, planes, 1, 1, conv_algo)
        self.conv2, self.bn2 = _conv_bn(planes, planes, 3, stride, conv_algo)
        self.conv3, self.bn3 = _conv_bn(planes, planes * 4, 1, 1, conv_algo)
        self.relu = act()
        self._shortcut(cin, planes * 4, stride, conv_algo)

    def residual(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        return self.bn3(self.conv3(x))


def _blocks(block, cin, widths, depths, conv_algo, act):
    """The blocks of every stage, flat; each stage after the first halves the map."""
    blocks = []
    for stage, (planes, depth) in enumerate(zip(widths, depths)):
        for i in range(depth):
            stride = 2 if stage > 0 and i == 0 else 1
            blocks.append(block(cin, planes, stride, conv_algo, act))
            cin = planes * block.expansion
    return blocks, cin


def _imagenet_resnet(block, depths, num_classes, in_channels, conv_algo, activation, name):
    """torchvision's ResNet: 7x7/2 stem, 3x3/2 max pool, 4 stages at 64..512 planes, fc."""
    act = activation_layer(activation, name)
    blocks, features = _blocks(block, 64, (64, 128, 256, 512), depths, conv_algo, act)
    return L.Sequential(
        L.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False, algo=conv_algo),
        L.BatchNorm2d(64),
        act(),
        L.MaxPool2d(3, stride=2, padding=1),
        *blocks,
        L.GlobalAvgPool2d(),
        L.Flatten(),
        L.Linear(features, num_classes),
    )


def resnet18(num_classes=1000, in_channels=3, conv_algo="auto", activation="relu"):
    """ResNet-18: basic blocks, 2 per stage."""
    return _imagenet_resnet(
        BasicBlock, (2, 2, 2, 2), num_classes, in_channels, conv_algo, activation, "resnet18"
    )


def resnet50(num_classes=1000, in_channels=3, conv_algo="auto", activation="relu"):
    """ResNet-50: bottleneck blocks, 3, 4, 6, 3 per stage."""
    return _imagenet_resnet(
        Bottleneck, (3, 4, 6, 3), num_classes, in_channels, conv_algo, activation, "resnet50"
    )


def resnet20(num_classes=10, in_channels=1, conv_algo="auto", activation="relu"):
    """ResNet-20 for small images (He et al. 2016, §4.2: n = 3): 3x3 stem of 16 channels,
    3 stages of 3 basic blocks at 16, 32, 64 channels, global average pool, fc."""
    act = activation_layer(activation, "resnet20")
    blocks, features = _blocks(BasicBlock, 16, (16, 32, 64), (3, 3, 3), conv_algo, act)
    return L.Sequential(
        *_conv_bn(in_channels, 16, 3, 1, conv_algo),
        act(),
        *blocks,
        L.GlobalAvgPool2d(),
        L.Flatten(),
        L.Linear(features, num_classes),
    )
