"""Layer constructors refuse bad sizes, naming the layer, the argument and its value."""

import numpy as np
import pytest

import minidl as md
from minidl import layers as L

# (id, constructor, error, what the message must say)
BAD = [
    (
        "conv_zero_in",
        lambda: L.Conv2d(0, 2, 3),
        ValueError,
        r"Conv2d: in_channels=0 is invalid; pass a positive int \(the input's channels",
    ),
    ("conv_zero_out", lambda: L.Conv2d(3, 0, 3), ValueError, r"Conv2d: out_channels=0"),
    ("conv_float_in", lambda: L.Conv2d(2.0, 2, 3), TypeError, r"Conv2d: in_channels=2\.0"),
    (
        "conv_kernel_pair",
        lambda: L.Conv2d(1, 2, (3, 0)),
        ValueError,
        r"Conv2d: kernel_size=\(3, 0\) is invalid; pass a positive int or a \(height, width\) pair",
    ),
    (
        "conv_kernel_triple",
        lambda: L.Conv2d(1, 2, (3, 3, 3)),
        TypeError,
        r"Conv2d: kernel_size=\(3, 3, 3\)",
    ),
    ("conv_stride", lambda: L.Conv2d(1, 2, 3, stride=0), ValueError, r"Conv2d: stride=0"),
    (
        "conv_padding",
        lambda: L.Conv2d(1, 2, 3, padding=-1),
        ValueError,
        r"Conv2d: padding=-1 is invalid; pass an int >= 0",
    ),
    (
        "conv_padding_string",
        lambda: L.Conv2d(1, 2, 3, padding="same"),
        TypeError,
        r"Conv2d: padding='same'",
    ),
    ("conv_dilation", lambda: L.Conv2d(1, 2, 3, dilation=0), ValueError, r"Conv2d: dilation=0"),
    ("conv_groups_zero", lambda: L.Conv2d(4, 4, 3, groups=0), ValueError, r"Conv2d: groups=0"),
    (
        "conv_groups_divide",
        lambda: L.Conv2d(4, 6, 3, groups=4),
        ValueError,
        r"Conv2d: groups=4 must divide in_channels=4 and out_channels=6; pass one of \[1, 2\]",
    ),
    (
        "linear_zero_in",
        lambda: L.Linear(0, 3),
        ValueError,
        r"Linear: in_features=0 is invalid; pass a positive int \(the input's features",
    ),
    ("linear_negative_out", lambda: L.Linear(3, -1), ValueError, r"Linear: out_features=-1"),
    ("linear_bool", lambda: L.Linear(True, 3), TypeError, r"Linear: in_features=True"),
    (
        "maxpool_kernel",
        lambda: L.MaxPool2d(0),
        ValueError,
        r"MaxPool2d: kernel_size=0 is invalid; pass a positive int",
    ),
    ("maxpool_padding", lambda: L.MaxPool2d(2, padding=-1), ValueError, r"MaxPool2d: padding=-1"),
    (
        "avgpool_stride",
        lambda: L.AvgPool2d(2, stride=(1, 0)),
        ValueError,
        r"AvgPool2d: stride=\(1, 0\)",
    ),
    ("avgpool_kernel_float", lambda: L.AvgPool2d(2.5), TypeError, r"AvgPool2d: kernel_size=2\.5"),
    (
        "dropout_one",
        lambda: L.Dropout(1.0),
        ValueError,
        r"Dropout: p=1\.0 is invalid; pass the probability of zeroing an element, in \[0, 1\)",
    ),
    ("dropout_negative", lambda: L.Dropout(-0.1), ValueError, r"Dropout: p=-0\.1"),
    ("dropout_nan", lambda: L.Dropout(float("nan")), ValueError, r"Dropout: p=nan"),
    ("dropout_string", lambda: L.Dropout("0.5"), TypeError, r"Dropout: p='0\.5'"),
    (
        "batchnorm2d_zero",
        lambda: L.BatchNorm2d(0),
        ValueError,
        r"BatchNorm2d: num_features=0 is invalid; pass a positive int \(the input's channels",
    ),
    (
        "batchnorm1d_eps",
        lambda: L.BatchNorm1d(3, eps=0),
        ValueError,
        r"BatchNorm1d: eps=0 is invalid; pass a number > 0",
    ),
    (
        "batchnorm1d_momentum",
        lambda: L.BatchNorm1d(3, momentum=1.5),
        ValueError,
        r"BatchNorm1d: momentum=1\.5 is invalid; pass .* in \[0, 1\]",
    ),
    (
        "lrn_size",
        lambda: L.LocalResponseNorm(0),
        ValueError,
        r"LocalResponseNorm: size=0 is invalid; pass a positive int",
    ),
    (
        "lrn_alpha",
        lambda: L.LocalResponseNorm(5, alpha=-1e-4),
        ValueError,
        r"LocalResponseNorm: alpha=-0\.0001",
    ),
    (
        "lrn_beta",
        lambda: L.LocalResponseNorm(5, beta=float("inf")),
        ValueError,
        r"LocalResponseNorm: beta=inf",
    ),
    (
        "lrn_k",
        lambda: L.LocalResponseNorm(5, k=0),
        ValueError,
        r"LocalResponseNorm: k=0 is invalid; pass a number > 0",
    ),
    (
        "flatten_start_dim",
        lambda: L.Flatten(1.0),
        TypeError,
        r"Flatten: start_dim=1\.0 is invalid; pass an int",
    ),
]


@pytest.mark.parametrize("make,error,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_constructor_argument_is_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_valid_forms_are_accepted_and_numpy_ints_become_python_ints():
    conv = L.Conv2d(np.int64(4), 6, (3, np.int32(5)), stride=[1, 2], padding=0, groups=2)
    assert conv.weight.shape == (6, 2, 3, 5) and conv.stride == (1, 2)
    assert type(conv.in_channels) is int
    assert L.Linear(np.int64(3), 2).weight.shape == (2, 3)
    pool = L.MaxPool2d((2, 3), stride=None, padding=np.int64(1))
    assert pool.kernel_size == (2, 3) and pool.stride is None and type(pool.padding) is int
    x = md.tensor(np.ones((1, 1, 6, 6)))
    assert pool(x).shape == (1, 1, 4, 2)
    assert L.AvgPool2d(2)(x).shape == (1, 1, 3, 3)
    assert L.Dropout(0).p == 0 and L.BatchNorm1d(3, momentum=1).momentum == 1
    assert L.Flatten(-2)(md.tensor(np.ones((2, 3, 4)))).shape == (2, 12)
