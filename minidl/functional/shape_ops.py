"""Ops that move values without changing them: reshape, transpose, flatten,
indexing, concatenate, stack, and copies to another device or dtype.

Each backward routes the gradient back to where the value came from.
"""

import numpy as np

from ..autograd import Function, ShapeError, Tensor, as_dtype
from ..backend import DEVICES, device_of, get_array_module, normalize_device, scatter_add, to_device


class Reshape(Function):
    """The gradient goes back in the input's memory layout (a channels-last or
    batch-last input gets a gradient laid out the same), so the ops before it
    keep working on matching layouts."""

    def forward(self, x, shape):
        self.in_shape = x.shape
        self.layout = None if x.flags.c_contiguous else x
        try:
            return x.reshape(shape)
        except ValueError:
            raise ShapeError(
                f"reshape: cannot reshape {x.shape} ({x.size} elements) into {tuple(shape)}"
            ) from None

    def backward(self, g):
        if self.layout is None:
            return g.reshape(self.in_shape)
        gx = get_array_module(g).empty_like(self.layout)
        gx[...] = g.reshape(self.in_shape)
        return gx


class Transpose(Function):
    def forward(self, x, axes):
        if axes is not None and sorted(a % x.ndim for a in axes) != list(range(x.ndim)):
            raise ShapeError(
                f"transpose: axes {axes} are not a permutation of "
                f"the {x.ndim} axes of shape {x.shape}"
            )
        self.axes = axes
        return x.transpose(axes)

    def backward(self, g):
        if self.axes is None:
            return g.transpose()
        return g.transpose(np.argsort([a % g.ndim for a in self.axes]))


class GetItem(Function):
    """x[key]; the gradient is scattered back (summed where an index repeats)."""

    def forward(self, x, key):
        self.in_shape, self.key = x.shape, key
        return x[key]

    def backward(self, g):
        xp = get_array_module(g)
        gx = xp.zeros(self.in_shape, dtype=g.dtype)
        if _is_basic_index(self.key):
            gx[self.key] = g
        else:
            scatter_add(gx, self.key, g)
        return gx


def _is_basic_index(key):
    """True for ints, slices, None and Ellipsis only: each element is hit once."""
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice, np.integer)) for k in keys)


class Concatenate(Function):
    def forward(self, *arrays, axis):
        xp = get_array_module(arrays[0])
        self.axis = axis % arrays[0].ndim
        self.bounds = np.cumsum([a.shape[self.axis] for a in arrays])[:-1]
        try:
            return xp.concatenate(arrays, axis=axis)
        except ValueError:
            raise ShapeError(
                f"concatenate: shapes {[a.shape for a in arrays]} differ outside axis {axis}"
            ) from None

    def backward(self, g):
        xp = get_array_module(g)
        return tuple(xp.split(g, self.bounds, axis=self.axis))


class Stack(Function):
    def forward(self, *arrays, axis):
        xp = get_array_module(arrays[0])
        if len({a.shape for a in arrays}) > 1:
            raise ShapeError(f"stack: all shapes must be equal, got {[a.shape for a in arrays]}")
        self.axis = axis % (arrays[0].ndim + 1)
        return xp.stack(arrays, axis=axis)

    def backward(self, g):
        return tuple(g.take(i, axis=self.axis) for i in range(g.shape[self.axis]))


class To(Function):
    """A copy on another device or of another dtype; the gradient goes back unchanged."""

    def forward(self, x, device, dtype):
        self.device, self.dtype = device_of(x), x.dtype
        y = to_device(x, device) if device else x
        if dtype is not None:
            return y.astype(dtype)
        return y.copy() if y is x else y

    def backward(self, g):
        return to_device(g, self.device).astype(self.dtype, copy=False)


def reshape(x: Tensor, *shape: int) -> Tensor:
    """The same values in a new shape (one entry may be -1)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Reshape.apply(x, shape=shape)


def transpose(x: Tensor, *axes: int) -> Tensor:
    """Permute axes (reverse them when none are given)."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    return Transpose.apply(x, axes=axes or None)


def flatten(x: Tensor, start_dim: int = 1) -> Tensor:
    """Merge the axes from ``start_dim`` on into one (``start_dim=1`` keeps the batch)."""
    start = start_dim % x.ndim if x.ndim else 0
    return reshape(x, x.shape[:start] + (-1,))


def getitem(x, key):
    """x[key] with basic or integer-array indexing."""
    if isinstance(key, Tensor):
        key = key.data
    elif isinstance(key, tuple):
        key = tuple(k.data if isinstance(k, Tensor) else k for k in key)
    return GetItem.apply(x, key=key)


def concatenate(tensors: list[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    return Concatenate.apply(*tensors, axis=axis)


def stack(tensors: list[Tensor], axis: int = 0) -> Tensor:
    """Join equally shaped tensors along a new axis."""
    return Stack.apply(*tensors, axis=axis)


def to(x, target):
    """A copy of ``x`` on a device (``"cpu"``, ``"cuda"``) or with a dtype."""
    name = str(target).split(":")[0]
    if name in DEVICES:
        return To.apply(x, device=normalize_device(target), dtype=None)
    return To.apply(x, device=None, dtype=as_dtype(target))
