"""2-D convolution with four algorithms: direct, im2col, FFT and Winograd (Ben-Nun & Hoefler 2019).

``conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1, algo="auto")``
computes the cross-correlation of Ben-Nun & Hoefler 2019, Eq. 2 (§4.3) on NCHW
tensors with weights (out, in/groups, kh, kw). ``algo`` is one of ``NAMES``:
``ALGORITHMS``, a Winograd tile, ``"auto"`` (``autotune``; ``print(report())``),
or a name that ``registry.register`` added (``import minidl.reference`` adds the
textbook versions, which ``auto`` never picks). Costs: ``multiplies(name, geometry)``,
``workspace_bytes(name, geometry, pass_, dtype="float32", device="cpu")``.

Memory format: im2col (for most shapes) and Winograd return NCHW-indexed arrays that are
channels-last in memory (an NHWC array seen through ``transpose(0, 3, 1, 2)``), as their
GEMMs produce channel-innermost rows and an NCHW copy would cost up to a third of the
forward pass; a following convolution reads them without a transpose.
"""

from ..autograd import Tensor
from .autotune import TUNER
from .base import PASSES, Unsupported
from .function import Conv2dFunction
from .geometry import ConvGeometry, make_geometry
from .registry import (
    ALGORITHMS,
    NAMES,
    applicable,
    implementation,
    multiplies,
    require,
    workspace_bytes,
)

__all__ = [
    "conv2d",
    "ALGORITHMS",
    "NAMES",
    "PASSES",
    "Unsupported",
    "ConvGeometry",
    "make_geometry",
    "implementation",
    "applicable",
    "multiplies",
    "workspace_bytes",
    "configure",
    "report",
    "clear_cache",
    "choices",
]


def conv2d(
    x: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    algo: str = "auto",
) -> Tensor:
    """Convolve x (N, C, H, W) with w (K, C/groups, KH, KW); differentiable in x, w and b."""
    geometry = make_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    return apply_conv2d(x, w, b, geometry, algo)


def apply_conv2d(x, w, b, geometry, algo="auto", label=None):
    """conv2d for a validated geometry; ``label`` names the calling layer in ``report()``."""
    if algo != "auto":
        require(algo, geometry)
    inputs = [t if isinstance(t, Tensor) else Tensor(t) for t in (x, w, b) if t is not None]
    return Conv2dFunction.apply(*inputs, geometry=geometry, algo=algo, label=label)


def configure(enabled=None, workspace_limit=..., repeats=None):
    """Autotuner settings: tuning on/off, workspace limit in bytes (None: none), repetitions."""
    TUNER.configure(enabled=enabled, workspace_limit=workspace_limit, repeats=repeats)


def report(model=None):
    """Which algorithm each tuned key (layer shape and pass) chose, and the timings behind it;
    with a ``model``, only its layers' keys, named by their paths (``"features.3"``)."""
    if model is None:
        return TUNER.report()
    names = {}
    for path, module in model.named_modules():
        for key in getattr(module, "tuning_keys", dict)().values():
            names.setdefault(key, []).append(path or type(module).__name__)
    return TUNER.report(names)


def clear_cache():
    """Forget every tuned choice (the next call of each shape tunes again)."""
    TUNER.choices.clear()


def choices():
    """The tuned choices: {(geometry, dtype, device, pass): Choice}."""
    return dict(TUNER.choices)
