"""One flat buffer for a list of parameters: what goes on the wire in one message.

Distributed training moves a model's weights or gradients as one contiguous
vector (one message instead of one per tensor), with a view of it per parameter.
"""

from minidl.autograd import no_grad
from minidl.backend import get_array_module


class FlatBuffer:
    """A contiguous vector with one view per parameter (same dtype, in list order)."""

    def __init__(self, params):
        if not params:
            raise ValueError("FlatBuffer: got no parameters")
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise ValueError(
                f"FlatBuffer: parameters of several dtypes {sorted(map(str, dtypes))}; "
                "convert the model to one dtype first"
            )
        xp = get_array_module(params[0].data)
        self.params = list(params)
        self.flat = xp.empty(sum(p.size for p in params), dtype=params[0].dtype)
        self.views, offset = [], 0
        for p in params:
            self.views.append(self.flat[offset : offset + p.size].reshape(p.shape))
            offset += p.size

    @property
    def size(self):
        return self.flat.size

    def gather_weights(self):
        """Copy the parameters' values into the vector; returns it."""
        xp = get_array_module(self.flat)
        for p, view in zip(self.params, self.views):
            xp.copyto(view, p.data)
        return self.flat

    def gather_grads(self, weight=1.0):
        """Copy ``weight`` times each gradient into the vector (0 where a gradient is None)."""
        xp = get_array_module(self.flat)
        for p, view in zip(self.params, self.views):
            if p.grad is None:  # unused in this step, or an empty local batch: contributes 0
                view[...] = 0
            elif weight == 1.0:
                xp.copyto(view, p.grad)
            else:
                xp.multiply(p.grad, weight, out=view)
        return self.flat

    def scatter_weights(self, flat=None):
        """Copy ``flat`` (default: the vector itself) into the parameters' values, in place."""
        xp = get_array_module(self.flat)
        if flat is not None and flat is not self.flat:
            xp.copyto(self.flat, flat)
        with no_grad():
            for p, view in zip(self.params, self.views):
                xp.copyto(p.data, view)

    def scatter_grads(self):
        """Make each parameter's gradient its view of the vector."""
        for p, view in zip(self.params, self.views):
            p.grad = view
