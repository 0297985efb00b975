"""The conv2d autograd Function: each pass runs the algorithm chosen for it.

The forward, the input gradient and the weight gradient are dispatched
separately (an explicit ``algo`` for all three, or the autotuner's choice per
pass). Two things are the same for every algorithm and live here once:

* groups: group g convolves input channels [g*C/G, (g+1)*C/G) with its
  K/G filters, an independent ordinary convolution;
* bias: ``y += b`` per output channel, and ``db = sum over (n, i, j) of dy``.
"""

from .. import backend
from ..autograd import Function
from .autotune import TUNER
from .registry import require


def _group_slices(geom):
    """Per group: (input-channel slice, output-channel slice)."""
    c, k = geom.in_channels // geom.groups, geom.out_channels // geom.groups
    return [(slice(g * c, (g + 1) * c), slice(g * k, (g + 1) * k)) for g in range(geom.groups)]


def run_forward(impl, x, w, geom, keep=False):
    """``(y, saved)`` for all groups; ``saved`` is a per-group list (or None)."""
    group = geom.per_group()
    results = [impl.forward(x[:, ci], w[ko], group, keep) for ci, ko in _group_slices(geom)]
    xp = backend.get_array_module(x)
    y = results[0][0] if len(results) == 1 else xp.concatenate([r[0] for r in results], axis=1)
    return y, ([r[1] for r in results] if keep else None)


def run_backward_input(impl, dy, w, geom, saved=None):
    """dx for all groups."""
    group = geom.per_group()
    parts = [
        impl.backward_input(dy[:, ko], w[ko], group, None if saved is None else saved[g])
        for g, (ci, ko) in enumerate(_group_slices(geom))
    ]
    return parts[0] if len(parts) == 1 else backend.get_array_module(dy).concatenate(parts, axis=1)


def run_backward_weight(impl, dy, x, geom, saved=None):
    """dw for all groups."""
    group = geom.per_group()
    parts = [
        impl.backward_weight(dy[:, ko], x[:, ci], group, None if saved is None else saved[g])
        for g, (ci, ko) in enumerate(_group_slices(geom))
    ]
    return parts[0] if len(parts) == 1 else backend.get_array_module(dy).concatenate(parts, axis=0)


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
        impl, (y, self.saved) = self._dispatch(
            "forward",
            lambda i: run_forward(i, x, w, geometry, keep=self._keep(i, need_x, need_w)),
            timed=lambda i: run_forward(i, x, w, geometry),
        )
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        self.forward_impl = impl
        self.x = x if need_w else None
        self.w = w if need_x else None
        return y

    def backward(self, dy):
        need_x, need_w, need_b = (tuple(self.needs_input_grad) + (False,))[:3]
        geom, saved = self.geom, self.saved

        def reuse(impl):
            return saved if impl is self.forward_impl else None

        dx = dw = db = None
        if need_x:
            dx = self._dispatch(
                "backward_input", lambda i: run_backward_input(i, dy, self.w, geom, reuse(i))
            )[1]
        if need_w:
            dw = self._dispatch(
                "backward_weight", lambda i: run_backward_weight(i, dy, self.x, geom, reuse(i))
            )[1]
        if need_b:
            db = dy.sum(axis=(0, 2, 3))
        self.saved = self.x = self.w = None
        return (dx, dw, db)[: len(self.inputs)]

    def _dispatch(self, pass_, run, timed=None):
        """``(impl, run(impl))`` with the algorithm for this pass; ``timed(impl)`` is what
        tuning times."""
        if self.algo != "auto":
            impl = require(self.algo, self.geom)
        else:
            impl = TUNER.choose(self.geom, self.dtype, self.device, pass_, timed or run, self.label)
        return impl, run(impl)

    def _keep(self, impl, need_x, need_w):
        """Keep the forward's reusable state when a backward pass will use the same algorithm.

        Not when the state is larger than the autotuner's workspace limit.
        """
        limit = TUNER.workspace_limit
        if limit is not None and impl.saved_bytes(self.geom.per_group(), self.dtype) > limit:
            return False
        for pass_, needed in (("backward_input", need_x), ("backward_weight", need_w)):
            if needed and pass_ in impl.reuses:
                later = (
                    require(self.algo, self.geom)
                    if self.algo != "auto"
                    else TUNER.known(self.geom, self.dtype, self.device, pass_)
                )
                if later is None or later is impl:
                    return True
        return False
