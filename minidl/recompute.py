"""Activation recomputation (Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost, §4):
``checkpoint(fn, *inputs)`` keeps a segment's inputs, not its activations, and runs its
forward again inside backward.

A network of L layers cut into N segments holds the N segment inputs between forward and
backward, and the L/N activations of one segment while backward goes through it: memory
O(N + L/N), least at N = sqrt(L), O(sqrt(L)) instead of O(L), for one more forward a step.

``checkpoint`` runs ``fn`` without a graph and links its output to one node. That node's
backward

1. sets the random streams where they stood before the first forward (``random.snapshot``:
   the generators and the sample keys), so every dropout mask is drawn again the same, and
   back where they stand after it: the stream after the step is the one without recomputing;
2. runs ``fn`` again with a graph on detached copies of the inputs, under ``is_recomputing()``:
   what the first forward updated in place is not updated twice (batch norm's running
   statistics and batch count: in training the recomputed output reads the batch's own
   statistics, so it equals the first);
3. backpropagates the output's gradient through it: the gradient of every tensor ``fn`` used
   that requires grad (a module's parameters) accumulates into its ``.grad`` there, its
   hooks firing there, and the inputs' gradients go on through the outer graph.
"""

from . import random
from .autograd import Function, Tensor, is_grad_enabled, set_grad_enabled, without_graph


class _Recomputing:
    active = False


def is_recomputing():
    """True while ``checkpoint`` runs a forward again in backward: state that the first
    forward updated in place (running statistics) must be left as it is."""
    return _Recomputing.active


class Recomputation(Function):
    """The graph node of a checkpointed segment: ``fn``, the random streams before its first
    forward (``draws``), and its inputs; backward recomputes (see the module doc)."""

    def __init__(self, fn, draws):
        self.fn, self.draws = fn, draws

    def backward(self, grad):
        detached = [Tensor(x.data, requires_grad=x.requires_grad) for x in self.inputs]
        after = random.snapshot()
        random.restore(self.draws)
        outer, _Recomputing.active = _Recomputing.active, True
        try:
            with set_grad_enabled(True):
                out = self.fn(*detached)
        finally:
            _Recomputing.active = outer
            random.restore(after)
        if out.requires_grad:
            out.backward(grad)
        return tuple(x.grad for x in detached)


def checkpoint(fn, *inputs):
    """``fn(*inputs)`` (Tensors in, one Tensor out) holding only ``inputs`` for backward, which
    recomputes ``fn``: the same output and gradients, the same random draws, fewer bytes held.
    Without gradients (``no_grad``) it is ``fn(*inputs)``."""
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise TypeError(f"checkpoint: input {i} is a {type(x).__name__}, not a Tensor")
    if not is_grad_enabled():
        return fn(*inputs)
    draws = random.snapshot()
    out, needs_grad = without_graph(fn, *inputs)
    if not isinstance(out, Tensor):
        raise TypeError(f"checkpoint: fn returned a {type(out).__name__}; it must return a Tensor")
    if not needs_grad:
        return out
    return Recomputation(fn, draws).link(out.data, inputs)
