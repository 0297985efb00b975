"""Weight initialisers, in place on a Tensor, drawing from ``minidl.random``.

For a weight of shape (out, in, *kernel): fan_in = in * prod(kernel),
fan_out = out * prod(kernel).
- Xavier/Glorot (Glorot & Bengio 2010): Var(w) = gain^2 * 2 / (fan_in + fan_out);
  uniform bound = gain * sqrt(6 / (fan_in + fan_out)).
- He (He et al. 2015; PyTorch calls it "kaiming"): Var(w) = gain^2 / fan;
  uniform bound = gain * sqrt(3 / fan), with gain = sqrt(2 / (1 + a^2)) for a
  leaky ReLU of slope a (a = 0: ReLU).
PyTorch's default for Linear and Conv2d weights is He-uniform with a = sqrt(5),
i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)); biases draw from the same interval.
"""

import math

from ..backend import get_array_module
from ..random import get_rng


def fans(shape):
    """(fan_in, fan_out) of a weight shape (out, in, *kernel)."""
    if len(shape) < 2:
        raise ValueError(
            f"fan-in and fan-out need a weight with at least 2 dimensions, got {shape}"
        )
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fill(tensor, draw):
    xp = get_array_module(tensor.data)
    tensor.data[...] = draw(get_rng(xp), tensor.shape).astype(tensor.dtype, copy=False)
    return tensor


def uniform_(tensor, low=0.0, high=1.0):
    """Fill with draws from U(low, high)."""
    return _fill(tensor, lambda rng, shape: rng.uniform(low, high, shape))


def normal_(tensor, mean=0.0, std=1.0):
    """Fill with draws from N(mean, std^2)."""
    return _fill(tensor, lambda rng, shape: rng.normal(mean, std, shape))


def constant_(tensor, value):
    tensor.data[...] = value
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def xavier_uniform_(tensor, gain=1.0):
    """Glorot uniform: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = fans(tensor.shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    """Glorot normal: N(0, gain^2 * 2 / (fan_in + fan_out))."""
    fan_in, fan_out = fans(tensor.shape)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _he_std(shape, a, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fans(shape)[0 if mode == "fan_in" else 1]
    return math.sqrt(2.0 / (1 + a * a)) / math.sqrt(fan)


def he_uniform_(tensor, a=0.0, mode="fan_in"):
    """He uniform: U(-b, b), b = sqrt(3) * gain / sqrt(fan), gain = sqrt(2 / (1 + a^2))."""
    bound = math.sqrt(3.0) * _he_std(tensor.shape, a, mode)
    return uniform_(tensor, -bound, bound)


def he_normal_(tensor, a=0.0, mode="fan_in"):
    """He normal: N(0, gain^2 / fan), gain = sqrt(2 / (1 + a^2))."""
    return normal_(tensor, 0.0, _he_std(tensor.shape, a, mode))


kaiming_uniform_ = he_uniform_
kaiming_normal_ = he_normal_


def default_init_(weight, bias=None):
    """PyTorch's Linear/Conv2d default: He-uniform with a = sqrt(5), bias U(+-1/sqrt(fan_in))."""
    he_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1.0 / math.sqrt(fans(weight.shape)[0])
        uniform_(bias, -bound, bound)
