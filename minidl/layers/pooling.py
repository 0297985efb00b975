"""Pooling layers over NCHW inputs (see ``functional.pooling``)."""

from .. import functional as F
from ..autograd import ShapeError
from .checks import size_arg
from .module import Module


class _Pool2d(Module):
    """Sizes are ints or (height, width) pairs; ``stride=None`` means the kernel size."""

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
    ):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = size_arg(name, "kernel_size", kernel_size)
        self.stride = None if stride is None else size_arg(name, "stride", stride)
        self.padding = size_arg(name, "padding", padding, minimum=0)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_Pool2d):
    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(_Pool2d):
    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


class GlobalAvgPool2d(Module):
    """The mean of each channel's map: (N, C, H, W) -> (N, C, 1, 1), whatever H and W are
    (PyTorch's ``AdaptiveAvgPool2d(1)``; Lin et al. 2014's global average pooling). Its
    gradient spreads g / (H*W) over the map (the autograd of ``mean``)."""

    def forward(self, x):
        if x.ndim != 4:
            raise ShapeError(
                f"GlobalAvgPool2d: expected an (N, C, H, W) input, got shape {x.shape}; "
                "put it after the convolutions, before Flatten"
            )
        return x.mean(axis=(2, 3), keepdims=True)
