"""The conv2d autograd Function: each pass runs the algorithm chosen for it (``algo``, or
the autotuner's choice per pass). Two things are the same for every algorithm, done here:

* groups: group g convolves input channels [g*C/G, (g+1)*C/G) with its K/G filters;
* bias: ``y += b`` per output channel, and ``db = sum over (n, i, j) of dy``.
"""

from .. import backend
from ..autograd import Function
from .autotune import TUNER
from .registry import require


def _groups(geom, saved=None):
    """Per group: (input-channel slice, output-channel slice, the forward's saved state)."""
    c, k = geom.in_channels // geom.groups, geom.out_channels // geom.groups
    return [
        (slice(g * c, (g + 1) * c), slice(g * k, (g + 1) * k), None if saved is None else saved[g])
        for g in range(geom.groups)
    ]


def _joined(parts, axis):
    """The groups' results side by side along the channel ``axis``."""
    if len(parts) == 1:
        return parts[0]
    return backend.get_array_module(parts[0]).concatenate(parts, axis)


def run_forward(impl, x, w, geom, keep=False):
    """``(y, saved)`` for all groups; ``saved`` is a per-group list (or None)."""
    group = geom.per_group()
    results = [impl.forward(x[:, ci], w[ko], group, keep) for ci, ko, _ in _groups(geom)]
    return _joined([r[0] for r in results], 1), ([r[1] for r in results] if keep else None)


def run_backward_input(impl, dy, w, geom, saved=None):
    """dx for all groups."""
    group = geom.per_group()
    parts = [impl.backward_input(dy[:, ko], w[ko], group, s) for _, ko, s in _groups(geom, saved)]
    return _joined(parts, 1)


def run_backward_weight(impl, dy, x, geom, saved=None):
    """dw for all groups."""
    group = geom.per_group()
    parts = [
        impl.backward_weight(dy[:, ko], x[:, ci], group, s) for ci, ko, s in _groups(geom, saved)
    ]
    return _joined(parts, 0)


class Conv2dFunction(Function):
    """y = conv2d(x, w) (+ b) with per-pass algorithm dispatch."""

    def forward(self, x, w, b=None, *, geometry, algo="auto", label=None):
        if x.dtype != w.dtype or (b is not None and b.dtype != x.dtype):
            dtypes = (x.dtype, w.dtype) + (() if b is None else (b.dtype,))
            raise TypeError(
                f"conv2d: input, weight and bias must share a dtype, got {dtypes}; "
                "convert with .to(dtype)"
            )
        if b is not None and tuple(b.shape) != (geometry.out_channels,):
            raise ValueError(
                f"conv2d: bias shape {tuple(b.shape)} does not match the "
                f"{geometry.out_channels} output channels of weight {tuple(w.shape)}"
            )
        self.geom, self.algo, self.label = geometry, algo, label
        self.device, self.dtype = backend.device_of(x), x.dtype
        need_x, need_w = (tuple(self.needs_input_grad) + (False, False))[:2]
        impl = self._impl("forward", lambda i: run_forward(i, x, w, geometry))
        y, self.saved = run_forward(impl, x, w, geometry, keep=self._keep(impl, need_x, need_w))
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        self.forward_impl = impl
        self.x = x if need_w else None
        self.w = w if need_x else None
        return y

    def backward(self, dy):
        need_x, need_w, need_b = (tuple(self.needs_input_grad) + (False,))[:3]
        geom, saved = self.geom, self.saved

        def backward_input(impl):
            return run_backward_input(impl, dy, self.w, geom, reuse(impl))

        def backward_weight(impl):
            return run_backward_weight(impl, dy, self.x, geom, reuse(impl))

        def reuse(impl):
            return saved if impl is self.forward_impl else None

        dx = backward_input(self._impl("backward_input", backward_input)) if need_x else None
        dw = backward_weight(self._impl("backward_weight", backward_weight)) if need_w else None
        db = dy.sum(axis=(0, 2, 3)) if need_b else None
        self.saved = self.x = self.w = None
        return (dx, dw, db)[: len(self.inputs)]

    def _impl(self, pass_, timed=None):
        """The algorithm for this pass: the explicit one, or the tuner's, which times
        ``timed(impl)`` on the key's first call (without ``timed``: None until then)."""
        if self.algo != "auto":
            return require(self.algo, self.geom)
        if timed is None:
            return TUNER.known(self.geom, self.dtype, self.device, pass_)
        return TUNER.choose(self.geom, self.dtype, self.device, pass_, timed, self.label)

    def _keep(self, impl, need_x, need_w):
        return keeps_state(impl, self.geom, self.dtype, self._impl, need_x, need_w)


def keeps_state(impl, geom, dtype, later, need_x, need_w):
    """Whether ``impl``'s forward keeps its reusable state: a backward pass that is needed
    (``need_x``: dx, ``need_w``: dw) reuses it and runs the same algorithm (``later(pass_)``:
    its algorithm, None while not yet chosen), and the state fits the autotuner's workspace
    limit."""
    limit = TUNER.workspace_limit
    if limit is not None and impl.saved_bytes(geom.per_group(), dtype) > limit:
        return False
    for pass_, needed in (("backward_input", need_x), ("backward_weight", need_w)):
        if needed and pass_ in impl.reuses:
            chosen = later(pass_)
            if chosen is None or chosen is impl:
                return True
    return False
