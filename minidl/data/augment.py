"""Batch augmentations for AlexNet-style training, vectorised over the batch and seeded.

Every transform is called on a whole NCHW batch as ``t(x, y, rng) -> (x, y)``
(``rng`` a ``numpy.random.Generator``, which the DataLoader supplies) and
returns a new array. They run on NumPy or CuPy arrays alike (random choices
are drawn on the host). Note that after normalisation a pixel value of 0 is the
dataset's mean grey, not black: pass ``fill=-mean/std`` to pad with black.
"""

from minidl.backend import get_array_module


class Compose:
    """Apply transforms in order: ``Compose([Pad(2), RandomHorizontalFlip()])``."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x, y, rng):
        for transform in self.transforms:
            x, y = transform(x, y, rng)
        return x, y


def pad_batch(x, padding, fill=0.0):
    """Pad the last two axes of an NCHW batch with ``padding`` pixels of ``fill`` on each side."""
    xp = get_array_module(x)
    n, c, h, w = x.shape
    out = xp.full((n, c, h + 2 * padding, w + 2 * padding), fill, dtype=x.dtype)
    out[:, :, padding : padding + h, padding : padding + w] = x
    return out


class Pad:
    """Pad every image with ``padding`` pixels on each side (e.g. 28x28 -> 32x32 with 2)."""

    def __init__(self, padding, fill=0.0):
        self.padding, self.fill = int(padding), fill

    def __call__(self, x, y, rng=None):
        return pad_batch(x, self.padding, self.fill), y


class CenterCrop:
    """Cut the central ``size`` x ``size`` window of every image."""

    def __init__(self, size):
        self.size = int(size)

    def __call__(self, x, y, rng=None):
        h, w = x.shape[-2:]
        if self.size > min(h, w):
            raise ValueError(f"CenterCrop({self.size}): images are only {h}x{w}")
        top, left = (h - self.size) // 2, (w - self.size) // 2
        return x[..., top : top + self.size, left : left + self.size].copy(), y


class RandomCrop:
    """Pad by ``padding`` with ``fill``, then cut a random ``size`` x ``size`` window per image.

    The offsets are uniform over every window that fits in the padded image,
    drawn independently for each image of the batch.
    """

    def __init__(self, size, padding=0, fill=0.0):
        self.size, self.padding, self.fill = int(size), int(padding), fill

    def __call__(self, x, y, rng):
        xp = get_array_module(x)
        padded = pad_batch(x, self.padding, self.fill) if self.padding else x
        n, _, h, w = padded.shape
        if self.size > min(h, w):
            raise ValueError(
                f"RandomCrop({self.size}, padding={self.padding}): padded images are only {h}x{w}"
            )
        top = xp.asarray(rng.integers(0, h - self.size + 1, size=n))
        left = xp.asarray(rng.integers(0, w - self.size + 1, size=n))
        windows = xp.lib.stride_tricks.sliding_window_view(
            padded, (self.size, self.size), axis=(2, 3)
        )
        # windows[i, :, top, left] is image i's window: shape (n, c, size, size)
        return xp.ascontiguousarray(windows[xp.arange(n), :, top, left]), y


class RandomHorizontalFlip:
    """Mirror each image left-right with probability ``p``, independently per image."""

    def __init__(self, p=0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: p must be in [0, 1], got {p}")
        self.p = p

    def __call__(self, x, y, rng):
        xp = get_array_module(x)
        flip = xp.asarray(rng.random(len(x)) < self.p).reshape(-1, *([1] * (x.ndim - 1)))
        return xp.where(flip, x[..., ::-1], x), y
