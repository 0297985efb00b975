"""Flatten layer: (N, C, H, W) -> (N, C*H*W) between convolutions and linear layers."""
from .. import functional as F
from .module import Module


class Flatten(Module):
    def __init__(self, start_dim=1):
        super().__init__()
        self.start_dim = start_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim)
