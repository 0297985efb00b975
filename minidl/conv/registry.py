"""The algorithm names users pass as ``algo=``, and which of them can compute a shape.

``"winograd"`` means the default tile, F(4x4, 3x3): 4x fewer multiplies than direct in its
GEMM stage (F(2x2, 3x3): 2.25x), the faster tile on 3x3 layers with 28 px or more
(``minidl bench conv``). Its float32 error, ~1e-5 of the largest output against ~5e-7 for
F(2x2) and im2col, is far below what SGD notices (tests/conv/test_conv_training.py);
``"winograd_f2x2_3x3"`` is more accurate and wastes less on small images (a 13x13 output
needs 4x4 tiles of 4 = 16x16, or 7x7 tiles of 2 = 14x14).

``auto`` picks among ``AUTO_CANDIDATES``, the library's own algorithms; others join by
``register`` and are chosen only by name (the textbook versions of ``minidl/reference/conv/``
register themselves when ``minidl.reference`` is imported).
"""

from .base import Unsupported
from .direct import DIRECT
from .fft import FFT_ALGORITHM
from .im2col import IM2COL
from .winograd import WINOGRAD_F2X2_3X3, WINOGRAD_F4X4_3X3

ALGORITHMS = ("direct", "im2col", "fft", "winograd")
DEFAULT_WINOGRAD = WINOGRAD_F4X4_3X3.name
ALIASES = {"winograd": DEFAULT_WINOGRAD}
_LIBRARY = (DIRECT, IM2COL, FFT_ALGORITHM, WINOGRAD_F2X2_3X3, WINOGRAD_F4X4_3X3)
AUTO_CANDIDATES = tuple(impl.name for impl in _LIBRARY)
IMPLEMENTATIONS = {impl.name: impl for impl in _LIBRARY}  # name -> algorithm; grows by register
NAMES = ["auto", *ALGORITHMS, *(n for n in AUTO_CANDIDATES if n not in ALGORITHMS)]


def register(*algorithms):
    """Make each algorithm selectable as ``algo=algorithm.name`` (never by ``auto``)."""
    for impl in algorithms:
        known = IMPLEMENTATIONS.get(impl.name)
        if known is not None and known is not impl:
            raise ValueError(
                f"conv2d: algorithm name {impl.name!r} is taken by {known!r}; "
                "register it under another name"
            )
        if known is None:
            IMPLEMENTATIONS[impl.name] = impl
            NAMES.append(impl.name)


def implementation(name):
    """The algorithm object for a name or alias; unknown names list the valid ones."""
    name = ALIASES.get(name, name)
    if name not in IMPLEMENTATIONS:
        raise ValueError(
            f"conv2d: unknown algo {name!r}; choose one of {tuple(NAMES)} "
            "(the textbook '*_reference' algorithms are registered by "
            "'import minidl.reference')"
        )
    return IMPLEMENTATIONS[name]


def applicable(geom):
    """The implementations ``auto`` may choose that can compute ``geom`` (per-group geometry)."""
    candidates = (IMPLEMENTATIONS[name] for name in AUTO_CANDIDATES)
    return [impl for impl in candidates if impl.unsupported(geom) is None]


def require(name, geom):
    """The implementation for an explicit request; ``Unsupported`` names the alternatives."""
    impl = implementation(name)
    reason = impl.unsupported(geom.per_group())
    if reason is not None:
        others = [n for n in ALGORITHMS if implementation(n).unsupported(geom.per_group()) is None]
        raise Unsupported(
            f"conv2d (algo={name!r}): {reason} for {geom.describe()}; "
            f"use {word_list([repr(n) for n in others])}"
        )
    return impl


def multiplies(name, geom):
    """Forward-pass multiplies of ``name`` for ``geom``, all groups, by stage and ``"total"``."""
    counts = {
        stage: count * geom.groups
        for stage, count in implementation(name).multiplies(geom.per_group()).items()
    }
    return {**counts, "total": sum(counts.values())}


def workspace_bytes(name, geom, pass_, dtype="float32", device="cpu"):
    """Temporary memory of one pass (one group at a time: the groups run one after another)."""
    return implementation(name).workspace_bytes(geom.per_group(), pass_, dtype, device)


def word_list(words, conjunction="or"):
    """``a``, ``a or b``, ``a, b or c``: words for an error message."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {conjunction} {words[-1]}"
