"""The timeline of a training run: per-layer forward/backward and the optimizer step, per rank.

``TrainingTrace(model, optimizer, rank)`` enables the process-wide tracer
(so communication and waiting spans that distributed code records land in
the same file), times every leaf layer with a ``LayerTimer`` and wraps the
optimizer's ``step``; ``finish(directory, comm)`` writes one merged
``trace.json``. ``minidl train --trace`` uses it.
"""
from . import trace
from .layer_timer import LayerTimer


class TrainingTrace:
    """Record a run from ``start()`` to ``finish()``."""

    def __init__(self, model, optimizer, rank=0, device="cpu"):
        self.model, self.optimizer, self.rank, self.device = model, optimizer, rank, device
        self.tracer = None
        self._timer = None

    def start(self):
        self.tracer = trace.enable(self.rank)
        tracer = self.tracer
        self._timer = LayerTimer(self.model, lambda name, phase, start, end:
                                 tracer.complete(name, phase, start, end), device=self.device)
        self._timer.__enter__()
        step = self.optimizer.step

        def traced_step(*args, **kwargs):
            with tracer.span("optimizer.step", cat="update"):
                return step(*args, **kwargs)
        object.__setattr__(self.optimizer, "step", traced_step)
        return self

    def finish(self, directory, comm=None):
        """Stop recording and write ``directory/trace.json`` (collective under MPI); returns its path."""
        self._timer.__exit__(None, None, None)
        del self.optimizer.step
        trace.disable()
        return trace.write_run_trace(self.tracer, directory, comm)
