"""Dropout layer: active in training mode, the identity after ``eval()``."""
from .. import functional as F
from .module import Module


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p={p} must lie in [0, 1)")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
