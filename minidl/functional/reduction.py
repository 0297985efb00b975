"""Reductions over one or several axes: sum, mean, max (with ``keepdims``).

The gradient of a reduction is the incoming gradient broadcast back over the
reduced axes: 1 for sum, 1/count for mean, and for max an equal share among
the elements that attain the maximum.
"""

from ..autograd import Function, ShapeError
from ..backend import get_array_module


def normalize_axes(axis, ndim, op):
    """``axis`` (None, an int or a tuple; negatives allowed) as a sorted tuple."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis}")
    return tuple(sorted(out))


class _Reduction(Function):
    def forward(self, x, axis, keepdims):
        self.in_shape = x.shape
        self.axes = normalize_axes(axis, x.ndim, type(self).__name__.lower())
        self.keepdims = keepdims
        return self.reduce(x)

    def expand(self, g):
        """``g`` reshaped so that it broadcasts against the input."""
        if self.keepdims:
            return g
        shape = list(self.in_shape)
        for a in self.axes:
            shape[a] = 1
        return g.reshape(shape)


class Sum(_Reduction):
    def reduce(self, x):
        return x.sum(axis=self.axes, keepdims=self.keepdims)

    def backward(self, g):
        xp = get_array_module(g)
        return xp.broadcast_to(self.expand(g), self.in_shape)


class Mean(_Reduction):
    def reduce(self, x):
        return x.mean(axis=self.axes, keepdims=self.keepdims)

    def backward(self, g):
        xp = get_array_module(g)
        count = 1
        for a in self.axes:
            count *= self.in_shape[a]
        return xp.broadcast_to(self.expand(g) / count, self.in_shape)


class Max(_Reduction):
    def reduce(self, x):
        self.x = x
        self.out = x.max(axis=self.axes, keepdims=True)
        return (
            self.out
            if self.keepdims
            else self.out.reshape([n for i, n in enumerate(x.shape) if i not in self.axes])
        )

    def backward(self, g):
        share = (self.x == self.out).astype(self.x.dtype)
        share /= share.sum(axis=self.axes, keepdims=True)
        return share * self.expand(g)


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (all axes when None)."""
    return Sum.apply(x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (all axes when None)."""
    return Mean.apply(x, axis=axis, keepdims=keepdims)


def max(x, axis=None, keepdims=False):
    """Maximum over ``axis``; ties share the gradient equally."""
    return Max.apply(x, axis=axis, keepdims=keepdims)
