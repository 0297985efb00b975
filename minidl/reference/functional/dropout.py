"""Inverted dropout (Srivastava et al. 2014, Dropout: A Simple Way to Prevent Neural
Networks from Overfitting).

In training, each element survives with probability 1 - p and survivors are
scaled by 1 / (1 - p):

    mask = [u >= p] / (1 - p),  u ~ Uniform[0, 1) per element
    y = x * mask,  dx = dy * mask

so E[y] = x and evaluation is the identity (the mask is all ones). The
random numbers come from the generator passed in, so a run is reproducible;
drawn as ``rng.random(shape, dtype)`` they give the same mask as
``minidl.functional.dropout`` after ``minidl.random.manual_seed`` with the
same seed.
"""

from ...backend import get_array_module


def dropout_forward(x, p, rng, training=True):
    """x * mask with a fresh mask from ``rng`` (a NumPy or CuPy Generator); the cache is
    the mask."""
    if not 0 <= p < 1:
        raise ValueError(
            f"dropout: p={p} is the probability of dropping an element; it must lie in [0, 1)"
        )
    xp = get_array_module(x)
    if not training:
        mask = xp.ones_like(x)
    else:
        keep = rng.random(x.shape, dtype=x.dtype) >= p
        mask = keep.astype(x.dtype) / x.dtype.type(1 - p)
    return x * mask, mask


def dropout_backward(dout, mask):
    """dx = dout * mask: dropped elements get no gradient, kept ones are scaled like the forward."""
    return dout * mask
