"""Looking inside a model without changing it: per-layer forward wrappers and gradient probes.

``wrapped_forwards(model, make)`` gives every leaf module (one without
sub-modules) an instance-level ``forward`` made by ``make(name, module,
original)`` and restores the class's method afterwards; ``Module.__call__``
calls ``self.forward``, so containers and user code run unchanged.

``probe(x, callback)`` is the identity on a tensor whose backward calls
``callback()`` when the gradient passes through it. Placing one on a layer's
output and one on its input brackets the layer's backward pass without
touching the autograd engine.
"""

import contextlib

from ..autograd import Function, Tensor
from ..layers import leaves


def leaf_modules(model):
    """``leaves(model)``, with a leaf model named by its type."""
    return [(name or type(m).__name__, m) for name, m in leaves(model)]


@contextlib.contextmanager
def wrapped_forwards(model, make, modules=None):
    """Within the block, each leaf's ``forward`` (or each of ``modules``, (name, module)
    pairs) is ``make(name, module, original_forward)``."""
    leaves = leaf_modules(model) if modules is None else modules
    wrapped = []
    try:
        for name, m in leaves:
            if "forward" in m.__dict__:
                raise RuntimeError(f"{name}: forward is already wrapped (nested instrumentation)")
            object.__setattr__(m, "forward", make(name, m, m.forward))
            wrapped.append(m)
        yield leaves
    finally:
        for m in wrapped:
            object.__delattr__(m, "forward")


class GradientProbe(Function):
    """Identity; its backward calls ``callback()`` before passing the gradient on."""

    def forward(self, x, callback):
        self.callback = callback
        return x

    def backward(self, grad):
        self.callback()
        return grad


def probe(x, callback):
    """``x`` unchanged, with ``callback`` fired when its gradient is computed (tensors only)."""
    if not isinstance(x, Tensor) or not x.requires_grad:
        return x
    return GradientProbe.apply(x, callback=callback)
