"""``F.conv2d``: 2-D convolution with a choice of algorithm (implemented in ``minidl.conv``)."""

from ..conv import conv2d

__all__ = ["conv2d"]
