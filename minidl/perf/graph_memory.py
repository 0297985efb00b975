"""The bytes an autograd graph holds between forward and backward: its activations.

Every node (``Function``) behind a tensor keeps its inputs and what its backward needs
(masks, normalised values, im2col columns...). ``graph_bytes`` counts the memory of those
arrays once each, by address range (a view of an array adds no bytes), leaving out the
leaves' arrays (the parameters and the batch, held with or without a graph). It is the
quantity activation recomputation shrinks (``minidl.recompute``: O(L) for L layers,
O(sqrt(L)) with sqrt(L) segments, Chen et al. 2016).
"""

from numpy.lib.array_utils import byte_bounds

from ..autograd import Tensor


def graph_bytes(root: Tensor, with_root: bool = False) -> int:
    """Bytes of the distinct arrays the graph behind ``root`` keeps, leaves' arrays left out
    (``with_root``: and ``root``'s own, as a loss keeps a model's output)."""
    held, leaves, seen, stack = [], [], set(), [root]
    if with_root and root._ctx is not None:
        held.append(_span(root.data))
    while stack:
        t = stack.pop()
        fn = t._ctx
        if fn is None:
            leaves.append(_span(t.data))
            continue
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        held += [_span(a) for a in _arrays(vars(fn))]  # its inputs' arrays among them
        stack += fn.inputs
    kept = [s for s in held if not any(a <= s[0] and s[1] <= b for a, b in leaves)]
    return _union_length(kept)


def distinct_bytes(arrays) -> int:
    """Bytes of the union of ``arrays``' memory: an array shared or viewed twice counts once."""
    return _union_length([_span(a) for a in arrays])


def _arrays(value):
    """The arrays in ``value`` (a Function's saved attributes): arrays, Tensors' data, and
    arrays nested in tuples, lists and dicts."""
    if isinstance(value, Tensor):
        yield value.data
    elif hasattr(value, "__array_interface__") or hasattr(value, "__cuda_array_interface__"):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _arrays(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _arrays(item)


def _span(array):
    """The address range ``[start, stop)`` of ``array``'s elements (a CuPy array: its buffer)."""
    if hasattr(array, "__cuda_array_interface__"):
        start = array.data.ptr
        return start, start + array.nbytes
    return byte_bounds(array)


def _union_length(spans):
    """The bytes covered by the union of ``spans``."""
    total, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start >= end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total
