"""Pipeline timelines as Chrome traces: measured (``minidl train --grid pp=P --trace``) or
simulated (``pipeline_simulate``), and the bubble read off either.

Each instruction a rank runs is one complete event of the trace (``perf.trace``):
category ``forward`` or ``backward`` (named ``F3``, ``B3``: the micro-batch;
``args`` hold micro-batch and chunk), ``send`` and ``recv`` (a receive's span is
the wait for its message) and ``update`` (``step``). ``pid`` is the rank.

Bubble of a timeline = 1 - compute / (P x span): the share of the P ranks' time
between the first event and the last that no forward or backward fills (the
simulator's definition, ``pipeline_simulate``; the formula for balanced stages is
(P-1)/(v*M+P-1)).
"""

from minidl.perf.trace import Tracer, merge, write_run_trace

CATEGORY = {
    "forward": "forward",
    "backward": "backward",
    "send_act": "send",
    "send_grad": "send",
    "recv_act": "recv",
    "recv_grad": "recv",
    "step": "update",
}
COMPUTE = ("forward", "backward")
TRACED_STEPS = 4  # steps of a run that --trace records (after one step of warm-up)


def record(tracer, instruction, start, end, step=0):
    """Add one instruction of batch ``step`` (``time.perf_counter()`` seconds) to ``tracer``."""
    op, m, c = instruction.op, instruction.micro_batch, instruction.chunk
    name = op[0].upper() + str(m) if op in COMPUTE else op
    tracer.complete(name, CATEGORY[op], start, end, micro_batch=m, chunk=c, step=step)


def simulation_trace(simulation, unit_seconds=1e-3):
    """The Chrome trace of a ``Simulation``: its compute events, one unit of simulated time
    = ``unit_seconds``."""
    traces = []
    for rank, events in enumerate(simulation.timeline):
        tracer = Tracer(rank)
        tracer._offset_us = 0.0  # simulated time starts at 0
        for event in events:
            record(tracer, event.instruction, event.start * unit_seconds, event.end * unit_seconds)
        traces.append(tracer.to_json())
    return merge(traces)


def bubble(trace):
    """The mean over the traced batches of 1 - (forward + backward time) / (ranks x span),
    the span of a batch running from its first event on any rank to its last."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "step" in e.get("args", {})]
    if not events:
        raise ValueError("the trace holds no pipeline instructions: is it a pipeline timeline?")
    ranks = len({e["pid"] for e in events})
    fractions = []
    for step in sorted({e["args"]["step"] for e in events}):
        batch = [e for e in events if e["args"]["step"] == step]
        span = max(e["ts"] + e["dur"] for e in batch) - min(e["ts"] for e in batch)
        busy = sum(e["dur"] for e in batch if e["cat"] in COMPUTE)
        fractions.append(1 - busy / (ranks * span) if span > 0 else 0.0)
    return sum(fractions) / len(fractions)


class PipelineTimeline:
    """``--trace`` of a pipeline run: the instructions of ``TRACED_STEPS`` steps after the
    first, on every rank, written as one ``trace.json`` (the interface of
    ``perf.training_trace.TrainingTrace``). ``executor`` is the rank's pipeline executor
    (``minidl.dist.pipeline.executor``), which records into a tracer it is given."""

    def __init__(self, executor, rank):
        self.executor, self.tracer = executor, Tracer(rank)

    def start(self):
        self.executor.trace(self.tracer, skip=1, steps=TRACED_STEPS)
        return self

    def finish(self, directory, comm=None):
        """Stop recording and write ``directory/trace.json`` (collective); returns its path."""
        self.executor.trace(None)
        return write_run_trace(self.tracer, directory, comm)
