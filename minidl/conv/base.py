"""What every convolution algorithm provides: the three passes, its costs, its limits.

An algorithm computes ``y = conv2d(x, w)`` (cross-correlation, Ben-Nun & Hoefler 2019, Eq. 2)
for one group (``geom.groups == 1``; the dispatcher loops over groups) and
both gradients: ``dx`` from ``dy`` and ``w``, ``dw`` from ``dy`` and ``x``.
The bias is added, and its gradient summed, once for all algorithms in
``function.py``. ``forward(..., keep=True)`` may return state (transformed
input or weights) that the same algorithm's backward passes reuse.
"""

import numpy as np

from ..chunks import chunk_length

PASSES = ("forward", "backward_input", "backward_weight")


class Unsupported(ValueError):
    """An algorithm was asked for a case it cannot compute; the message names alternatives."""


class ConvAlgorithm:
    """Interface of one convolution algorithm; subclasses live one per file."""

    name = None
    reuses = frozenset()  # backward passes that can use ``forward(..., keep=True)``'s state

    def unsupported(self, geom):
        """Why this algorithm cannot compute ``geom`` (a phrase), or None when it can."""
        return None

    def forward(self, x, w, geom, keep=False):
        """``(y, saved)``: the output (N, K, OH, OW) and reusable state (or None)."""
        raise NotImplementedError

    def backward_input(self, dy, w, geom, saved=None):
        """Gradient of the input (N, C, H, W) from the output gradient."""
        raise NotImplementedError

    def backward_weight(self, dy, x, geom, saved=None):
        """Gradient of the weight (K, C, KH, KW) from the output gradient."""
        raise NotImplementedError

    def multiplies(self, geom):
        """Real multiplies of the forward pass by stage (``registry.multiplies`` adds the total)."""
        raise NotImplementedError

    def workspace_bytes(self, geom, pass_, dtype="float32", device="cpu"):
        """Temporary memory of one pass beyond its inputs and output, in bytes; ``dtype`` and
        ``device`` give the item size and the images per chunk (``minidl/chunks.py``)."""
        itemsize = np.dtype(dtype).itemsize

        def chunk(batch, elements_per_image):
            return chunk_length(batch, elements_per_image * itemsize, gpu=device != "cpu")

        return itemsize * self.workspace_elements(geom, pass_, chunk)

    def workspace_elements(self, geom, pass_, chunk):
        """The peak of one pass's temporary arrays, in elements (a complex number counts two);
        ``chunk(batch, elements_per_image)``: the images per chunk, as ``batch_chunks`` splits."""
        raise NotImplementedError

    def saved_bytes(self, geom, dtype="float32"):
        """Memory that ``forward(..., keep=True)`` holds for the backward passes, in bytes."""
        return np.dtype(dtype).itemsize * self.saved_elements(geom)

    def saved_elements(self, geom):
        """``saved_bytes`` in elements."""
        return 0

    def __repr__(self):
        return f"<conv algorithm {self.name}>"
