"""2-D convolution layer over NCHW inputs (see ``minidl.conv``)."""

import numpy as np

from ..autograd import as_dtype
from ..conv import apply_conv2d, make_geometry
from ..conv.autotune import TUNER
from ..conv.base import PASSES
from ..conv.geometry import pair
from . import init
from .checks import groups_arg, int_arg, size_arg
from .module import Module, Parameter


class Conv2d(Module):
    """Weight (out, in/groups, kh, kw) and bias (out,), PyTorch's default initialisation.

    ``algo`` picks the convolution algorithm for every pass (``"auto"``: the
    autotuner's per-shape choice). After a forward pass, ``algorithms()``
    says which algorithm each pass used for the last input shape.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        algo: str = "auto",
        dtype: str = "float32",
    ):
        super().__init__()
        in_channels = int_arg(
            "Conv2d", "in_channels", in_channels, hint="the input's channels, x.shape[1]"
        )
        out_channels = int_arg("Conv2d", "out_channels", out_channels, hint="the number of filters")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = pair(size_arg("Conv2d", "kernel_size", kernel_size), "kernel_size")
        self.stride = pair(size_arg("Conv2d", "stride", stride), "stride")
        self.padding = pair(size_arg("Conv2d", "padding", padding, minimum=0), "padding")
        self.dilation = pair(size_arg("Conv2d", "dilation", dilation), "dilation")
        self.groups = groups_arg("Conv2d", groups, in_channels, out_channels)
        self.algo = algo
        dtype = as_dtype(dtype)
        shape = (out_channels, in_channels // self.groups) + self.kernel_size
        self.weight = Parameter(np.empty(shape, dtype=dtype))
        self.bias = Parameter(np.empty(out_channels, dtype=dtype)) if bias else None
        init.default_init_(self.weight, self.bias)
        self._last = None  # (geometry, dtype, device) of the last forward
        self._label = f"Conv2d({self.extra_repr()})"  # names the layer in the tuner's report

    def forward(self, x):
        geometry = make_geometry(
            x.shape, self.weight.shape, self.stride, self.padding, self.dilation, self.groups
        )
        self._last = (geometry, x.dtype, x.device)
        return apply_conv2d(x, self.weight, self.bias, geometry, self.algo, label=self._label)

    def algorithms(self):
        """{pass: algorithm name} used for the last input shape (None where not yet run)."""
        if self._last is None:
            return {}
        if self.algo != "auto":
            return {p: self.algo for p in PASSES}
        return {p: getattr(TUNER.known(*self._last, p), "name", None) for p in PASSES}

    def tuning_keys(self):
        """{pass: autotuner key} of the last input shape (what ``minidl.conv.report(model)``
        reads)."""
        if self._last is None or self.algo != "auto":
            return {}
        return {p: self._last + (p,) for p in PASSES}

    def extra_repr(self):
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}"
        )
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + f", bias={self.bias is not None}, algo={self.algo!r}"
