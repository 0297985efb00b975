"""The shape of one convolution: sizes, stride, padding, dilation, groups.

Output size along one axis (Ben-Nun & Hoefler 2019, App. A.4, minus sign restored; dilation as
in Yu & Koltun 2016): ``O = floor((I + 2*p - d*(K - 1) - 1) / s) + 1`` (``output_size``), for
convolution and pooling windows alike. A ``ConvGeometry`` is hashable, so it doubles as the
autotuner's cache key.
"""

import functools
import math
from dataclasses import dataclass, replace

from ..autograd import ShapeError


def pair(value, name, op="conv2d"):
    """``3 -> (3, 3)``; ``(3, 5) -> (3, 5)``; anything else is an error naming op and name."""
    if isinstance(value, int):
        return (value, value)
    try:
        a, b = value
    except (TypeError, ValueError):
        a = b = None
    if not (isinstance(a, int) and isinstance(b, int)):
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, not {value!r}")
    return (a, b)


def output_size(size, kernel, stride=1, padding=0, dilation=1):
    """Outputs of a window sliding along one axis: floor((size + 2p - d(kernel-1) - 1) / s) + 1."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def window_slices(tap, stride, dilation, out_size):
    """Per axis, the slice of the padded input that kernel tap ``tap`` meets at every output.

    Output i meets tap u at padded index i*s + u*d: indices u*d, u*d + s, ..., u*d + s*(O - 1).
    """
    return tuple(
        slice(u * d, u * d + s * (o - 1) + 1, s)
        for u, s, d, o in zip(tap, stride, dilation, out_size)
    )


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
        return output_size(
            self.height, self.kernel_h, self.stride[0], self.padding[0], self.dilation[0]
        )

    @property
    def out_w(self):
        return output_size(
            self.width, self.kernel_w, self.stride[1], self.padding[1], self.dilation[1]
        )

    @property
    def padded_size(self):
        """(H + 2*ph, W + 2*pw): the zero-padded input."""
        return (self.height + 2 * self.padding[0], self.width + 2 * self.padding[1])

    @property
    def dilated_kernel(self):
        """(d*(KH - 1) + 1, d*(KW - 1) + 1): the rows and columns the dilated kernel spans."""
        dh, dw = self.dilation
        return (dh * (self.kernel_h - 1) + 1, dw * (self.kernel_w - 1) + 1)

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
        """The (rows, cols) slices of the padded input that kernel tap (u, v) multiplies."""
        return window_slices((u, v), self.stride, self.dilation, (self.out_h, self.out_w))

    def direct_multiplies(self):
        """Multiplies of the definition, N*K*(C/g)*KH*KW*OH*OW (Ben-Nun & Hoefler 2019, Table 6)."""
        return self.batch * math.prod(self.weight_shape) * self.out_h * self.out_w

    def transposed(self):
        """The stride-1 correlation that gives dx: dy (N, K, OH, OW) with ``flipped_kernel(w)``.

        Its padding d*(KH-1) - p may be negative (the padded input is then cropped).
        """
        (dh, dw), (ph, pw) = self.dilation, self.padding
        return replace(
            self,
            in_channels=self.out_channels,
            out_channels=self.in_channels,
            height=self.out_h,
            width=self.out_w,
            padding=(dh * (self.kernel_h - 1) - ph, dw * (self.kernel_w - 1) - pw),
        )

    def describe(self):
        """A short human-readable form, e.g. ``16x64x56x56 * 64x64x3x3 s1 p1``."""
        text = " * ".join(
            "x".join(map(str, shape)) for shape in (self.input_shape, self.weight_shape)
        )
        for label, (a, b) in (("s", self.stride), ("p", self.padding), ("d", self.dilation)):
            if label != "d" or (a, b) != (1, 1):
                text += f" {label}{a}" if a == b else f" {label}{a},{b}"
        if self.groups != 1:
            text += f" g{self.groups}"
        return text


def make_geometry(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """Validated geometry of a conv2d call; errors name the shapes and the fix."""
    if len(x_shape) != 4:
        raise ShapeError(f"conv2d: input must be 4-D (N, C, H, W), got shape {tuple(x_shape)}")
    if len(w_shape) != 4:
        raise ShapeError(
            f"conv2d: weight must be 4-D (out, in/groups, kh, kw), got shape {tuple(w_shape)}"
        )
    stride, padding = pair(stride, "stride"), pair(padding, "padding")
    dilation = pair(dilation, "dilation")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive int, not {groups!r}")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ValueError(
            f"conv2d: stride {stride} and dilation {dilation} must be >= 1 "
            f"and padding {padding} >= 0"
        )
    n, c, h, w = (int(v) for v in x_shape)
    k, cg, kh, kw = (int(v) for v in w_shape)
    if cg * groups != c:
        raise ShapeError(
            f"conv2d: weight {tuple(w_shape)} expects {cg}*groups={cg * groups} input "
            f"channels but the input {tuple(x_shape)} has {c}; "
            f"use a weight of shape ({k}, {c // groups}, {kh}, {kw})"
        )
    if k % groups:
        raise ShapeError(
            f"conv2d: out_channels {k} of weight {tuple(w_shape)} is not divisible "
            f"by groups={groups}"
        )
    geom = ConvGeometry(n, c, h, w, k, kh, kw, stride, padding, dilation, groups)
    if geom.out_h < 1 or geom.out_w < 1:
        raise ShapeError(
            f"conv2d: input {tuple(x_shape)} padded by {padding} is smaller than the "
            f"dilated kernel {tuple(w_shape)} (dilation {dilation}); "
            "use a larger input or more padding"
        )
    return geom


@functools.lru_cache(maxsize=1024)
def _per_group(geom):
    c, k, g = geom.in_channels, geom.out_channels, geom.groups
    return replace(geom, in_channels=c // g, out_channels=k // g, groups=1)
