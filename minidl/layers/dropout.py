"""Dropout layer: active in training mode, the identity after ``eval()``."""

from .. import functional as F
from .checks import number_arg
from .module import Module


class Dropout(Module):
    """``F.dropout``; ``stream``: its draws' number within a sample's forward
    (``random.number_streams``; None: counted as they come)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.stream = None
        self.p = number_arg(
            "Dropout",
            "p",
            p,
            lambda v: 0 <= v < 1,
            "the probability of zeroing an element, in [0, 1)",
        )

    def forward(self, x):
        return F.dropout(x, self.p, self.training, self.stream)

    def extra_repr(self):
        return f"p={self.p}"
