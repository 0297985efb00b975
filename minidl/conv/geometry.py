"""The shape of one convolution: sizes, stride, padding, dilation, groups.

Output size (Ben-Nun & Hoefler 2019, App. A.4, minus sign restored; dilation as in Yu & Koltun):
``OH = floor((H + 2*ph - dh*(KH - 1) - 1) / sh) + 1`` and likewise ``OW``.
A ``ConvGeometry`` is hashable, so it doubles as the autotuner's cache key.
"""
import functools
from dataclasses import dataclass, replace

from ..autograd import ShapeError


def pair(value, name):
    """``3 -> (3, 3)``; ``(3, 5) -> (3, 5)``; anything else is an error naming ``name``."""
    if isinstance(value, int):
        return (value, value)
    try:
        a, b = value
    except (TypeError, ValueError):
        raise TypeError(f"conv2d: {name} must be an int or a pair of ints, not {value!r}") from None
    if not (isinstance(a, int) and isinstance(b, int)):
        raise TypeError(f"conv2d: {name} must be an int or a pair of ints, not {value!r}")
    return (a, b)


@dataclass(frozen=True)
class ConvGeometry:
    """Sizes of ``y = conv2d(x, w)`` with x (N, C, H, W) and w (K, C/groups, KH, KW)."""

    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride: tuple = (1, 1)
    padding: tuple = (0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1

    @property
    def out_h(self):
        return (self.height + 2 * self.padding[0]
                - self.dilation[0] * (self.kernel_h - 1) - 1) // self.stride[0] + 1

    @property
    def out_w(self):
        return (self.width + 2 * self.padding[1]
                - self.dilation[1] * (self.kernel_w - 1) - 1) // self.stride[1] + 1

    @property
    def input_shape(self):
        return (self.batch, self.in_channels, self.height, self.width)

    @property
    def weight_shape(self):
        return (self.out_channels, self.in_channels // self.groups, self.kernel_h, self.kernel_w)

    @property
    def output_shape(self):
        return (self.batch, self.out_channels, self.out_h, self.out_w)

    def per_group(self):
        """The geometry of one group: an ordinary (groups=1) convolution (cached: hot path)."""
        return _per_group(self)

    def window(self, u, v):
        """The (rows, cols) slices of the padded input that kernel tap (u, v) multiplies.

        Output (i, j) meets tap (u, v) at padded pixel (i*sh + u*dh, j*sw + v*dw):
        rows u*dh, u*dh + sh, ..., u*dh + sh*(OH - 1), and likewise the columns.
        """
        (sh, sw), (dh, dw) = self.stride, self.dilation
        return (slice(u * dh, u * dh + sh * (self.out_h - 1) + 1, sh),
                slice(v * dw, v * dw + sw * (self.out_w - 1) + 1, sw))

    def direct_multiplies(self):
        """Multiplies of the definition (Ben-Nun & Hoefler 2019, Table 6, 'Direct'): N*K*(C/g)*KH*KW*OH*OW."""
        return (self.batch * self.out_channels * (self.in_channels // self.groups)
                * self.kernel_h * self.kernel_w * self.out_h * self.out_w)

    def describe(self):
        """A short human-readable form, e.g. ``16x64x56x56 * 64x64x3x3 s1 p1``."""
        n, c, h, w = self.input_shape
        k, cg, kh, kw = self.weight_shape
        text = f"{n}x{c}x{h}x{w} * {k}x{cg}x{kh}x{kw}"
        for label, value in (("s", self.stride), ("p", self.padding), ("d", self.dilation)):
            if label == "d" and value == (1, 1):
                continue
            text += f" {label}{value[0]}" if value[0] == value[1] else f" {label}{value[0]},{value[1]}"
        if self.groups != 1:
            text += f" g{self.groups}"
        return text


def make_geometry(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """Validate the shapes and hyper-parameters of a conv2d call; errors name the shapes and the fix."""
    if len(x_shape) != 4:
        raise ShapeError(f"conv2d: input must be 4-D (N, C, H, W), got shape {tuple(x_shape)}")
    if len(w_shape) != 4:
        raise ShapeError(f"conv2d: weight must be 4-D (out, in/groups, kh, kw), got shape {tuple(w_shape)}")
    stride, padding, dilation = pair(stride, "stride"), pair(padding, "padding"), pair(dilation, "dilation")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive int, not {groups!r}")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ValueError(f"conv2d: stride {stride} and dilation {dilation} must be >= 1 "
                         f"and padding {padding} >= 0")
    n, c, h, w = (int(v) for v in x_shape)
    k, cg, kh, kw = (int(v) for v in w_shape)
    if cg * groups != c:
        raise ShapeError(f"conv2d: weight {tuple(w_shape)} expects {cg}*groups={cg * groups} input "
                         f"channels but the input {tuple(x_shape)} has {c}; "
                         f"use a weight of shape ({k}, {c // groups}, {kh}, {kw})")
    if k % groups:
        raise ShapeError(f"conv2d: out_channels {k} of weight {tuple(w_shape)} is not divisible "
                         f"by groups={groups}")
    geom = ConvGeometry(n, c, h, w, k, kh, kw, stride, padding, dilation, groups)
    if geom.out_h < 1 or geom.out_w < 1:
        raise ShapeError(f"conv2d: input {tuple(x_shape)} padded by {padding} is smaller than the "
                         f"dilated kernel {tuple(w_shape)} (dilation {dilation}); "
                         "use a larger input or more padding")
    return geom


@functools.lru_cache(maxsize=1024)
def _per_group(geom):
    return replace(geom, in_channels=geom.in_channels // geom.groups,
                   out_channels=geom.out_channels // geom.groups, groups=1)
