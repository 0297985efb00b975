"""Inverted dropout (Srivastava et al. 2014): in training, zero each element
with probability p and scale the survivors by 1/(1-p), so that evaluation is
the identity. Draws come from ``minidl.random`` (seed it with ``manual_seed``):
one stream per sample while the training loop sets the batch's sample keys
(``random.set_sample_keys``: seed, epoch and dataset index), else the shared generator.
"""

from ..autograd import Function, Tensor
from ..backend import get_array_module
from ..random import get_rng, sample_draws


class Dropout(Function):
    def forward(self, x, p, stream=None):
        xp = get_array_module(x)
        keyed = sample_draws(x.shape[0], stream)
        if keyed is None:
            draws = get_rng(xp).random(x.shape, dtype=x.dtype)
        else:
            draws = xp.asarray(keyed.random(x.shape, dtype=x.dtype))
        keep = draws >= p
        self.mask = keep.astype(x.dtype)
        self.mask *= 1.0 / (1.0 - p)
        return x * self.mask

    def backward(self, g):
        return g * self.mask


def dropout(x: Tensor, p: float = 0.5, training: bool = True, stream=None) -> Tensor:
    """Zero elements with probability ``p`` when ``training``; identity otherwise. ``stream``:
    the layer's number among the model's random draws (``random.sample_draws``)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p={p} must lie in [0, 1)")
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p, stream=stream)
