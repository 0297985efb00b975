"""Flatten layer: (N, C, H, W) -> (N, C*H*W) between convolutions and linear layers."""

from .. import functional as F
from .checks import is_int
from .module import Module


class Flatten(Module):
    def __init__(self, start_dim: int = 1):
        super().__init__()
        if not is_int(start_dim):
            raise TypeError(
                f"Flatten: start_dim={start_dim!r} is invalid; pass an int (1 keeps the batch axis)"
            )
        self.start_dim = int(start_dim)

    def forward(self, x):
        return F.flatten(x, self.start_dim)
