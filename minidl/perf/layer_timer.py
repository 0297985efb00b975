"""Forward and backward time of every leaf layer, without touching the autograd engine.

Forward: each leaf's ``forward`` is wrapped and timed. Backward: a probe on
the layer's output fires when the output gradient arrives (the layer's
backward starts); the layer's backward ends when the probe on its input
fires (the input gradient is done) or, for a layer whose input needs no
gradient (the first layer), when the gradient of its last parameter is
final (``register_post_accumulate_grad_hook``).

Each interval is handed to ``on_interval(name, phase, start, end)`` with
``phase`` "forward" or "backward" and times from ``clock`` (seconds).
On a GPU, ``synchronize`` runs before every clock reading.
"""

import time

from ..backend import synchronize
from .instrument import probe, wrapped_forwards


class _Call:
    """One call of a layer: when its backward started and what still has to happen."""

    __slots__ = ("start", "expect_input_grad", "pending_hooks")

    def __init__(self, expect_input_grad, pending_hooks):
        self.start = None
        self.expect_input_grad = expect_input_grad
        self.pending_hooks = pending_hooks


class LayerTimer:
    """Context manager that reports per-layer forward and backward intervals of ``model``."""

    def __init__(self, model, on_interval, clock=time.perf_counter, device="cpu"):
        self.model, self.on_interval, self.clock = model, on_interval, clock
        self.gpu = device != "cpu"
        self._wrap = None
        self._hooks = []
        self._waiting = {}  # layer name -> calls whose backward ends at their last parameter hook

    def now(self):
        if self.gpu:
            synchronize()
        return self.clock()

    def _make(self, name, module, original):
        params = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        for p in params:
            self._hooks.append(
                p.register_post_accumulate_grad_hook(
                    lambda _p, name=name: self._parameter_done(name)
                )
            )

        def forward(x, *args, **kwargs):
            call = _Call(getattr(x, "requires_grad", False), len(params))
            x = probe(x, lambda: self._input_grad_done(name, call))
            start = self.now()
            y = original(x, *args, **kwargs)
            self.on_interval(name, "forward", start, self.now())
            if (
                call.pending_hooks
                and not call.expect_input_grad
                and getattr(y, "requires_grad", False)
            ):
                self._waiting.setdefault(name, []).append(call)
            return probe(y, lambda: self._output_grad_arrived(call))

        return forward

    def _output_grad_arrived(self, call):
        call.start = self.now()

    def _input_grad_done(self, name, call):
        if call.start is not None:
            self.on_interval(name, "backward", call.start, self.now())

    def _parameter_done(self, name):
        calls = self._waiting.get(name, [])
        while calls and calls[0].start is None:  # forwards that were never backpropagated
            calls.pop(0)
        if not calls:
            return
        call = calls[0]
        call.pending_hooks -= 1
        if call.pending_hooks == 0:
            calls.pop(0)
            self.on_interval(name, "backward", call.start, self.now())

    def __enter__(self):
        self._wrap = wrapped_forwards(self.model, self._make)
        self._wrap.__enter__()
        return self

    def __exit__(self, *exc):
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        self._waiting.clear()
        return self._wrap.__exit__(*exc)
