"""AlexNet (Krizhevsky et al. 2012) in three variants of the same 5-conv + 3-FC structure.

- ``original``: the 2012 paper: 96@11x11/4, LRN, pool, 256@5x5 (2 groups),
  LRN, pool, 384@3x3, 384@3x3 (2 groups), 256@3x3 (2 groups), pool, fc 4096,
  4096, classes, dropout 0.5 before fc6 and fc7. 227x227 inputs; 60,965,224
  parameters for 1000 classes. LRN: n=5, k=2, beta=0.75 and the paper's
  alpha=1e-4 (passed as 5e-4 in PyTorch's alpha/n convention).
- ``torchvision``: the single-tower form common today: 64@11x11/4 pad 2, pool,
  192@5x5, pool, 384, 256, 256 @3x3, pool, fc 4096, 4096, classes; no LRN,
  no groups; 224x224 inputs give 6x6 maps; 61,100,840 parameters. Where a
  pooling layer follows a convolution, the ReLU comes after the pooling: for
  max pooling and a monotonic activation the function and its gradient are
  the same (max(f(a), f(b)) = f(max(a, b))), on ~4x fewer values.
- ``small``: the same structure scaled to 28x28 (or 32x32) images so that it
  trains on a CPU in minutes: 32@3x3, LRN, pool, 64@3x3, LRN, pool, 96, 96,
  64 @3x3, pool, fc 256, 256, classes with dropout.

``image_size`` (``original`` and ``torchvision``) sizes the first fully
connected layer for other square inputs (the feature map after the last
pooling, ``features_side``), e.g. small crops in tests; the default is the
variant's own 227 or 224. ``dropout`` replaces the classifier's dropout
probability (None: 0.5, ``small`` 0.3; 0: none).
``paper_init`` is the paper's initialisation (Sec. 5).
"""

from .. import layers as L
from ..layers import init
from .activations import activation_layer

VARIANTS = ("original", "torchvision", "small")
IMAGE_SIZE = {"original": 227, "torchvision": 224}
# (kernel, stride, padding) of the layers that change the map size, input to features
_GEOMETRY = {
    "original": [(11, 4, 0), (3, 2, 0), (5, 1, 2), (3, 2, 0), (3, 1, 1), (3, 2, 0)],
    "torchvision": [(11, 4, 2), (3, 2, 0), (5, 1, 2), (3, 2, 0), (3, 1, 1), (3, 2, 0)],
}


def _side(variant, image_size):
    """``(s + 2p - k) // stride + 1`` through each layer of ``_GEOMETRY``; 0 once it vanishes."""
    side = image_size
    for kernel, stride, padding in _GEOMETRY[variant]:
        side = (side + 2 * padding - kernel) // stride + 1
        if side < 1:
            return 0
    return side


def features_side(variant, image_size):
    """Side of the last feature map for ``image_size`` inputs; a ValueError names the smallest
    size when the map vanishes."""
    side = _side(variant, image_size)
    if side < 1:
        smallest = next(n for n in range(image_size, 1000) if _side(variant, n))
        raise ValueError(
            f"alexnet {variant!r}: {image_size}x{image_size} images are too small (at least "
            f"{smallest}x{smallest}); use larger crops, or --model alexnet-small for 28x28"
        )
    return side


def paper_init(model):
    """Krizhevsky et al. 2012, Sec. 5: every weight ~ N(0, 0.01); biases 1 in the second,
    fourth and fifth convolutional layers and the hidden fully connected layers, 0 elsewhere
    (the layers are counted in order, so it fits the ``original`` and ``torchvision`` variants)."""
    convs = [m for m in model.modules() if isinstance(m, L.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, L.Linear)]
    if len(convs) != 5 or len(linears) != 3:
        raise ValueError("paper_init: expects AlexNet's 5 convolutional and 3 linear layers")
    ones = {id(m) for m in (convs[1], convs[3], convs[4], *linears[:2])}
    for layer in convs + linears:
        init.normal_(layer.weight, 0.0, 0.01)
        init.constant_(layer.bias, 1.0 if id(layer) in ones else 0.0)
    return model


def _lrn():
    return L.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=2.0)


def _classifier(features, hidden, num_classes, dropout, act):
    return [
        L.Flatten(),
        L.Dropout(dropout),
        L.Linear(features, hidden),
        act(),
        L.Dropout(dropout),
        L.Linear(hidden, hidden),
        act(),
        L.Linear(hidden, num_classes),
    ]


def alexnet(
    num_classes: int = 1000,
    variant: str = "torchvision",
    in_channels: int = 3,
    conv_algo: str = "auto",
    activation: str = "relu",
    image_size: int | None = None,
    dropout: float | None = None,
) -> L.Sequential:
    """AlexNet; ``variant`` is one of ``VARIANTS`` (see the module doc)."""
    act = activation_layer(activation, "alexnet")
    p = (0.3 if variant == "small" else 0.5) if dropout is None else dropout
    if variant in IMAGE_SIZE:
        side = features_side(variant, image_size or IMAGE_SIZE[variant])

    def conv(cin, cout, k, stride=1, padding=0, groups=1):
        return [
            L.Conv2d(cin, cout, k, stride=stride, padding=padding, groups=groups, algo=conv_algo),
            act(),
        ]

    def conv_pool(cin, cout, k, stride=1, padding=0):
        return [
            L.Conv2d(cin, cout, k, stride=stride, padding=padding, algo=conv_algo),
            pool(),
            act(),
        ]

    pool = lambda: L.MaxPool2d(3, stride=2)  # noqa: E731  (overlapping pooling)
    if variant == "original":
        layers = (
            conv(in_channels, 96, 11, stride=4)
            + [_lrn(), pool()]
            + conv(96, 256, 5, padding=2, groups=2)
            + [_lrn(), pool()]
            + conv(256, 384, 3, padding=1)
            + conv(384, 384, 3, padding=1, groups=2)
            + conv(384, 256, 3, padding=1, groups=2)
            + [pool()]
            + _classifier(256 * side * side, 4096, num_classes, p, act)
        )
    elif variant == "torchvision":  # pooling before the activation: see the module doc
        layers = (
            conv_pool(in_channels, 64, 11, stride=4, padding=2)
            + conv_pool(64, 192, 5, padding=2)
            + conv(192, 384, 3, padding=1)
            + conv(384, 256, 3, padding=1)
            + conv_pool(256, 256, 3, padding=1)
            + _classifier(256 * side * side, 4096, num_classes, p, act)
        )
    elif variant == "small":
        layers = (
            conv(in_channels, 32, 3, padding=1)
            + [_lrn(), L.MaxPool2d(2)]
            + conv(32, 64, 3, padding=1)
            + [_lrn(), L.MaxPool2d(2)]
            + conv(64, 96, 3, padding=1)
            + conv(96, 96, 3, padding=1)
            + conv(96, 64, 3, padding=1)
            + [L.MaxPool2d(2)]
            + _classifier(64 * 3 * 3, 256, num_classes, p, act)
        )
    else:
        raise ValueError(f"alexnet: variant {variant!r} is not one of {VARIANTS}")
    return L.Sequential(*layers)
