"""``Recompute``: a ``Sequential`` whose layers run in N contiguous segments, each through
``minidl.recompute.checkpoint`` (Chen et al. 2016): between forward and backward only the
segments' inputs are held; N = round(sqrt(L)) holds O(sqrt(L)) activations of L layers for
one more forward a step (``sqrt_segments``).

The layers keep their names ("0", "1", ...), so the state dict, a checkpoint file and the
parameter order are the plain ``Sequential``'s: a file written with recomputation loads
into a model without it, and the other way round.
"""

import functools
import math

from ..intmath import block_bounds
from ..recompute import checkpoint
from .checks import is_int
from .module import Sequential


def sqrt_segments(num_layers):
    """Chen et al.'s N = round(sqrt(L)) segments for L layers (at least one)."""
    return max(1, round(math.sqrt(num_layers)))


class Recompute(Sequential):
    """The layers of ``sequential`` under the same names, run in ``segments`` contiguous
    segments (sizes differing by at most one, the first ones longer), each recomputed in
    backward. Without gradients (``no_grad``, evaluation) it runs as the ``Sequential``."""

    def __init__(self, sequential, segments):
        if not isinstance(sequential, Sequential) or type(sequential).forward is not (
            Sequential.forward
        ):
            raise TypeError(
                f"Recompute cuts a plain Sequential into segments, not a "
                f"{type(sequential).__name__}, whose forward does more than run its layers"
            )
        if not is_int(segments) or not 1 <= segments <= len(sequential):
            raise ValueError(
                f"Recompute: {segments!r} segments of a Sequential of {len(sequential)} layers; "
                f"choose 1 to {len(sequential)}"
            )
        super().__init__(*sequential)
        self.bounds = block_bounds(len(self), segments)

    def forward(self, x):
        return run_segments(list(self), self.bounds, x)

    def within(self, start, stop):
        """The segments of layers ``start..stop-1`` (a pipeline stage's), cut at ``start`` and
        ``stop`` and counted from ``start``."""
        return tuple(
            (max(a, start) - start, min(b, stop) - start)
            for a, b in self.bounds
            if a < stop and b > start
        )

    def extra_repr(self):
        return f"segments={len(self.bounds)}"


def run_segments(layers, bounds, x):
    """``x`` through ``layers``, each ``(start, stop)`` of ``bounds`` as one ``checkpoint``."""
    for start, stop in bounds:
        x = checkpoint(functools.partial(_run, tuple(layers[start:stop])), x)
    return x


def _run(layers, x):
    for layer in layers:
        x = layer(x)
    return x
