"""The timeline of a training run: per-layer compute, the optimizer step and communication,
per rank.

``TrainingTrace(model, optimizer, rank, comm=comm)`` enables the
process-wide tracer (so spans that other code records land in the same
file), times every leaf layer with a ``LayerTimer``, wraps the optimizer's
``step`` and, with a communicator, its ``allreduce`` and ``iallreduce``:
a blocking allreduce is one "comm" span; a non-blocking one (the
overlapped gradient buckets of ``DistributedOptimizer``) is a "comm" span
from its start to when its data was reduced, which may run alongside
backward, plus a "wait" span for the time ``wait()`` blocked.
``finish(directory, comm)`` restores everything and writes one merged
``trace.json``. ``minidl train --trace`` uses it.
"""

import time

from . import trace
from .layer_timer import LayerTimer


class TrainingTrace:
    """Record a run from ``start()`` to ``finish()``."""

    def __init__(self, model, optimizer, rank=0, device="cpu", comm=None):
        self.model, self.optimizer, self.rank, self.device = model, optimizer, rank, device
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.tracer = None
        self._timer = None

    def start(self):
        self.tracer = trace.enable(self.rank)
        tracer = self.tracer
        self._timer = LayerTimer(
            self.model,
            lambda name, phase, start, end: tracer.complete(name, phase, start, end),
            device=self.device,
        )
        self._timer.__enter__()
        step = self.optimizer.step

        def traced_step(*args, **kwargs):
            with tracer.span("optimizer.step", cat="update"):
                return step(*args, **kwargs)

        object.__setattr__(self.optimizer, "step", traced_step)
        if self.comm is not None:
            self._trace_comm(self.comm, tracer)
        return self

    @staticmethod
    def _trace_comm(comm, tracer):
        allreduce, iallreduce = comm.allreduce, comm.iallreduce

        def traced_allreduce(array, op="sum", algorithm="auto"):
            with tracer.span("allreduce", cat="comm", bytes=int(array.nbytes)):
                return allreduce(array, op, algorithm)

        def traced_iallreduce(array, op="sum", algorithm="auto"):
            request = iallreduce(array, op, algorithm)
            wait, nbytes, recorded = request.wait, int(array.nbytes), []

            def traced_wait():
                start = time.perf_counter()
                result = wait()
                if not recorded:
                    recorded.append(True)
                    tracer.complete(
                        "wait for allreduce", "wait", start, time.perf_counter(), bytes=nbytes
                    )
                    tracer.complete(
                        "allreduce", "comm", request.started, request.finished, bytes=nbytes
                    )
                return result

            request.wait = traced_wait
            return request

        comm.allreduce, comm.iallreduce = traced_allreduce, traced_iallreduce

    def finish(self, directory, comm=None):
        """Stop recording and write ``directory/trace.json`` (collective under MPI); returns
        its path."""
        self._timer.__exit__(None, None, None)
        del self.optimizer.step
        if self.comm is not None:
            del self.comm.allreduce, self.comm.iallreduce
        trace.disable()
        return trace.write_run_trace(self.tracer, directory, comm)
