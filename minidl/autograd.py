"""Reverse-mode automatic differentiation: ``Tensor``, ``Function``, ``no_grad``.

A ``Function`` computes its output from raw arrays in ``forward`` and keeps
what ``backward`` needs on ``self`` (its saved context). ``Function.apply``
links the output to the function only while gradients are enabled and some
input requires them, so inference builds no graph.

``Tensor.backward`` visits the graph in reverse topological order (every
consumer of a tensor before the tensor itself), applies the chain rule
``dL/dx = sum over consumers f of (df/dx)^T dL/df``, sums the contributions of
a tensor used more than once, stores the result in the ``.grad`` of the leaves
(tensors created by the user, not by an op) and frees the graph as it goes.
"""

import contextlib
import reprlib

import numpy as np

from . import backend

DTYPES = {
    name: np.dtype(name)
    for name in (
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
    )
}


class ShapeError(ValueError):
    """Operands whose shapes an op cannot combine; the message names both."""


class DeviceError(RuntimeError):
    """Operands that live on different devices."""


class _GradMode:
    enabled = True
    skipped = False  # an op left an input that requires grad out of the graph (without_graph)


def is_grad_enabled():
    return _GradMode.enabled


@contextlib.contextmanager
def set_grad_enabled(mode):
    """Context manager: ops inside it build a graph when ``mode`` is True, none when False."""
    previous, _GradMode.enabled = _GradMode.enabled, bool(mode)
    try:
        yield
    finally:
        _GradMode.enabled = previous


def no_grad():
    """Context manager: ops inside it build no graph (inference, updates)."""
    return set_grad_enabled(False)


def without_graph(fn, *args):
    """``fn(*args)`` under ``no_grad``, and whether an op inside it had an input that requires
    grad (its result would have required grad): activation recomputation (``minidl.recompute``)
    links a segment into the graph only then."""
    outer, _GradMode.skipped = _GradMode.skipped, False
    try:
        with no_grad():
            out = fn(*args)
        return out, _GradMode.skipped
    finally:
        _GradMode.skipped = outer or _GradMode.skipped


def as_dtype(dtype):
    """A NumPy dtype from a name (``"float32"``), a dtype, or a type."""
    try:
        return DTYPES[dtype] if isinstance(dtype, str) else np.dtype(dtype)
    except (KeyError, TypeError):
        raise TypeError(f"unknown dtype {dtype!r}: choose one of {tuple(DTYPES)}") from None


class Function:
    """One differentiable op: ``forward(*arrays, **params)`` and ``backward(grad)``.

    ``backward`` returns one gradient per input (a tuple, or a bare array for
    a single input), each shaped like that input; ``None`` where
    ``self.needs_input_grad[i]`` is False, so work nobody needs is skipped.
    """

    inputs = ()
    needs_input_grad = ()

    def forward(self, *arrays, **params):
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, grad):
        raise NotImplementedError(f"{type(self).__name__}.backward")

    @classmethod
    def apply(cls, *inputs, **params):
        """Run the op on Tensors; link the result into the graph when needed."""
        fn = cls()
        arrays = [t.data for t in inputs]
        if len(arrays) > 1:
            _check_same_device(cls.__name__, arrays)
        needed = any(t.requires_grad for t in inputs)
        track = needed and _GradMode.enabled
        if track:  # before forward: an op may keep less when an input needs no gradient
            fn.needs_input_grad = tuple(t.requires_grad for t in inputs)
        elif needed:
            _GradMode.skipped = True
        out = fn.forward(*arrays, **params)
        return fn.link(out, inputs) if track else Tensor(out)

    def link(self, data, inputs):
        """``data``, computed by this op from the Tensors ``inputs``, as a Tensor in the graph:
        backward passes its gradient through ``self.backward`` to the inputs that require it."""
        self.inputs = inputs
        self.needs_input_grad = tuple(t.requires_grad for t in inputs)
        out = Tensor(data, requires_grad=True)
        out._ctx = self
        return out


def _check_same_device(op, arrays):
    on_cpu = [isinstance(a, np.ndarray) for a in arrays]
    if any(on_cpu) and not all(on_cpu):
        devices = ", ".join(backend.device_of(a) for a in arrays)
        raise DeviceError(
            f"{op}: operands are on different devices ({devices}); "
            "move them to one device with .to('cpu') or .to('cuda')"
        )


class _FreedGraph:
    """Stands in for the Function of a tensor whose graph backward already freed."""

    inputs = ()


_FREED = _FreedGraph()


class Tensor:
    """An n-dimensional array (NumPy or CuPy) that can record its history.

    ``data`` is the array; ``grad`` the gradient accumulated by ``backward``
    (leaves only; ``None`` until then). ``requires_grad`` marks tensors whose
    gradient is wanted.

    ``Tensor(data)`` wraps ``data`` as it is: an array is neither copied nor
    cast (float64 stays float64, so ops keep their inputs' dtype, and a batch
    of float32 images is wrapped for free); a list or number becomes the
    array NumPy makes of it (``Tensor([1, 2])`` is int64). ``md.tensor``, the
    user-facing constructor, copies and casts to its ``dtype`` (float32 by
    default) instead.
    """

    __slots__ = ("data", "grad", "requires_grad", "_ctx", "_hooks", "__weakref__")
    __array_ufunc__ = None  # ndarray <op> Tensor defers to Tensor's reflected operator

    def __init__(self, data, requires_grad=False):
        if not isinstance(data, np.ndarray) or data.dtype.kind not in _NUMBER_KINDS:
            data = _as_array(data)
        if requires_grad and data.dtype.kind != "f":
            raise TypeError(f"only floating-point tensors can require gradients, not {data.dtype}")
        self.data = data
        self.grad = None
        self.requires_grad = requires_grad
        self._ctx = None
        self._hooks = None

    # ----------------------------------------------------------------- info
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    device = property(lambda self: backend.device_of(self.data))
    is_leaf = property(lambda self: self._ctx is None)

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        grad = ", requires_grad=True" if self.requires_grad else ""
        dev = "" if self.device == "cpu" else ", device='cuda'"
        body = np.array2string(backend.to_numpy(self.data), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self.dtype}{dev}{grad})"

    def __array__(self, dtype=None, copy=None):
        a = backend.to_numpy(self.data)
        return a if dtype is None else a.astype(dtype)

    # ----------------------------------------------------------- conversion
    def numpy(self):
        """The values as a NumPy array (shares memory on the CPU)."""
        return backend.to_numpy(self.data)

    def item(self) -> float:
        """The value of a one-element tensor as a Python number."""
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, not shape {self.shape}")
        return self.data.reshape(()).item()

    def detach(self) -> "Tensor":
        """The same data, cut from the graph (no gradient flows through it)."""
        return Tensor(self.data)

    def to(self, target):
        """A copy on another device (``"cpu"``/``"cuda"``) or of another dtype; differentiable."""
        return _ops.to(self, target)

    # ------------------------------------------------------------- backward
    def backward(self, grad=None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

        ``grad`` is the gradient of some scalar with respect to ``self``; it
        may be omitted only when ``self`` holds one element (it is then 1).
        The graph is freed afterwards unless ``retain_graph`` is True.
        """
        if not self.requires_grad:
            raise RuntimeError(
                "backward() on a tensor that does not require grad: "
                "no input of the computation had requires_grad=True"
            )
        xp = backend.get_array_module(self.data)
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward() without a gradient needs a one-element tensor, not shape "
                    f"{self.shape}: reduce it first (e.g. loss.sum()) or pass grad="
                )
            grad = xp.ones_like(self.data)
        else:
            grad = grad.data if isinstance(grad, Tensor) else grad
            if grad.shape != self.shape:
                raise ShapeError(
                    f"backward(): grad has shape {grad.shape}, the tensor has shape {self.shape}"
                )
        if self._ctx is None:
            _accumulate_leaf(self, grad, set())
            _run_hooks(self)
            return
        order, leaf_uses = _topological_order(self)
        grads, taken = {id(self): grad}, set()
        for t in order:
            fn = t._ctx
            g = grads.pop(id(t))
            in_grads = fn.backward(g)
            if not isinstance(in_grads, tuple):
                in_grads = (in_grads,)
            for x, gx in zip(fn.inputs, in_grads):
                if not x.requires_grad:
                    continue
                if x._ctx is None:
                    if gx is not None:
                        _accumulate_leaf(x, gx, taken)
                    leaf_uses[id(x)] -= 1
                    if leaf_uses[id(x)] == 0:
                        _run_hooks(x)
                elif gx is not None:
                    k = id(x)
                    grads[k] = grads[k] + gx if k in grads else gx
            if not retain_graph:
                t._ctx = _FREED

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` once per backward, after this leaf's ``.grad`` is final.

        Returns a handle whose ``remove()`` unregisters the hook. Distributed
        training uses it to start communicating a gradient while backward goes on.
        """
        if self._ctx is not None:
            raise RuntimeError("gradient hooks can only be registered on leaf tensors")
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(hook)
        return _HookHandle(self._hooks, hook)

    # ----------------------------------------------------- ops as methods
    def __add__(self, other):
        return _ops.add(self, other)

    def __radd__(self, other):
        return _ops.add(other, self)

    def __sub__(self, other):
        return _ops.sub(self, other)

    def __rsub__(self, other):
        return _ops.sub(other, self)

    def __mul__(self, other):
        return _ops.mul(self, other)

    def __rmul__(self, other):
        return _ops.mul(other, self)

    def __truediv__(self, other):
        return _ops.div(self, other)

    def __rtruediv__(self, other):
        return _ops.div(other, self)

    def __pow__(self, other):
        return _ops.pow(self, other)

    def __rpow__(self, other):
        return _ops.pow(other, self)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        return _ops.matmul(other, self)

    def __neg__(self):
        return _ops.neg(self)

    def __getitem__(self, key):
        return _ops.getitem(self, key)

    def sum(self, axis=None, keepdims=False):
        return _ops.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops.max(self, axis, keepdims)

    def reshape(self, *shape):
        return _ops.reshape(self, *shape)

    def transpose(self, *axes):
        return _ops.transpose(self, *axes)

    T = property(lambda self: _ops.transpose(self))

    def flatten(self, start_dim=0):
        return _ops.flatten(self, start_dim)

    def exp(self):
        return _ops.exp(self)

    def log(self):
        return _ops.log(self)

    def sqrt(self):
        return _ops.sqrt(self)

    def relu(self):
        return _ops.relu(self)

    def tanh(self):
        return _ops.tanh(self)

    def sigmoid(self):
        return _ops.sigmoid(self)

    def argmax(self, axis=None):
        """Indices of the maxima (an integer tensor; not differentiable)."""
        return Tensor(self.data.argmax(axis=axis))


class _HookHandle:
    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


_NUMBER_KINDS = "biuf"  # the NumPy dtype kinds a tensor may hold: bool, ints, floats
_ACCEPTED = (
    "a NumPy or CuPy array of numbers, a Python number, a (nested) list or tuple of "
    "numbers, or a Tensor"
)


def _as_array(data):
    """An ndarray of numbers from array-likes; CuPy arrays pass through unchanged.

    Anything else is refused: NumPy would turn ``None`` into a NaN (or an
    object array) and a ragged list into an object array, silently.
    """
    if isinstance(data, Tensor):
        return data.data
    if backend.get_array_module(data) is not np:
        return data
    try:
        array = np.asarray(data)
    except ValueError as exc:  # ragged nested lists
        raise ValueError(
            f"cannot make a tensor from {_describe(data)}: {str(exc).rstrip('.')}; pass {_ACCEPTED}"
        ) from None
    if array.dtype.kind not in _NUMBER_KINDS:
        raise TypeError(
            f"cannot make a tensor from {_describe(data)}: NumPy reads it as dtype "
            f"{array.dtype}, and tensors hold bools, ints or floats; pass {_ACCEPTED}"
        )
    return array


def _describe(data):
    return f"{reprlib.repr(data)} (a {type(data).__name__})"


def _accumulate_leaf(leaf, grad, taken):
    """Add ``grad`` into ``leaf.grad``; the leaf gets an array no other leaf holds.

    Gradients reaching leaves may be read-only views (broadcasts) or the very
    array another input received (``a + b`` passes one gradient to both);
    ``taken`` holds the ids of arrays already given to leaves in this pass.
    """
    if leaf.grad is None:
        xp = backend.get_array_module(grad)
        own = xp.ascontiguousarray(grad, dtype=leaf.data.dtype)
        if id(own) in taken or not own.flags.writeable:
            own = own.copy()
        taken.add(id(own))
        leaf.grad = own
    else:
        leaf.grad = leaf.grad + grad


def _run_hooks(leaf):
    if leaf._hooks:
        for hook in tuple(leaf._hooks):
            hook(leaf)


def _topological_order(root):
    """Non-leaf tensors reachable from ``root``, each before any of its inputs.

    Also counts, for each leaf that requires grad, how many graph edges reach
    it, so its hooks can fire once its last contribution has arrived.
    """
    post_order, visited, leaf_uses = [], set(), {}
    stack = [(root, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            post_order.append(t)
            continue
        if id(t) in visited:
            continue
        if t._ctx is _FREED:
            raise RuntimeError(
                "backward() through a graph a second time: its saved values were freed; "
                "pass retain_graph=True to the first backward() to keep them"
            )
        visited.add(id(t))
        stack.append((t, True))
        for x in t._ctx.inputs:
            if not x.requires_grad:
                continue
            if x._ctx is None:
                leaf_uses[id(x)] = leaf_uses.get(id(x), 0) + 1
            elif id(x) not in visited:
                stack.append((x, False))
    post_order.reverse()
    return post_order, leaf_uses


def tensor(
    data, requires_grad: bool = False, dtype: str = "float32", device: str = "cpu"
) -> Tensor:
    """Create a leaf Tensor from an array, a list or a number: always a copy, of ``dtype``.

    The dtype is ``dtype`` whatever the data's: a float64 array or a list of
    ints becomes float32 unless another ``dtype`` is given (e.g.
    ``dtype="float64"`` for gradient checks). ``md.Tensor(array)`` keeps the
    array's dtype and shares its memory instead. ``None``, strings and ragged
    lists are refused with an error naming what was passed.
    """
    xp = backend.xp_for(device)
    data = _as_array(data)
    if backend.get_array_module(data) is not np:
        data = backend.to_device(data, device)
    return Tensor(xp.array(data, dtype=as_dtype(dtype)), requires_grad=requires_grad)


def checked_state_value(value, like, where, owner, shape_fix):
    """``value`` (an array, or a Tensor's array) once it is known to fit in place of ``like``.

    Loading saved state checks every entry with this before changing any, so
    that a bad entry leaves the model or optimizer as it was. The shape must
    be ``like``'s; the dtype must convert to ``like``'s within its kind
    (NumPy's "same_kind" casting: float64 into float32 is fine, a float into
    an integer counter is not). ``where`` names the entry in errors, ``owner``
    is what ``like`` belongs to, ``shape_fix`` how to get a state that fits.
    """
    if isinstance(value, Tensor):
        value = value.data
    elif backend.get_array_module(value) is np:
        value = np.asarray(value)
    if tuple(value.shape) != tuple(like.shape):
        raise ValueError(
            f"{where} has shape {tuple(value.shape)} in the state but "
            f"{tuple(like.shape)} in the {owner}; {shape_fix}"
        )
    if not np.can_cast(value.dtype, like.dtype, casting="same_kind"):
        raise TypeError(
            f"{where} is {value.dtype} in the state but {like.dtype} in the {owner}, "
            f"and {value.dtype} -> {like.dtype} would change the kind of number; "
            f"store it as {like.dtype} (are two entries swapped?)"
        )
    return value


from . import functional as _ops  # noqa: E402  (the ops need Tensor defined first)
