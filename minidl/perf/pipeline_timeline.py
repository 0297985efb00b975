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

``plot_timeline`` draws a timeline to a PNG: one row per rank, time to the right, each
instruction a bar coloured by kind (forward, backward, send, waiting to receive, update);
white is idle. ``minidl report`` draws it for a run traced with ``--grid ...,pp=P --trace``.
"""

import json
import os

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


def time_shares(trace):
    """{category: its share of the P ranks' time over each traced batch's span} (mean over the
    batches; ``idle``: between instructions), the span of a batch running from its first event
    on any rank to its last."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "step" in e.get("args", {})]
    if not events:
        raise ValueError("the trace holds no pipeline instructions: is it a pipeline timeline?")
    ranks = len({e["pid"] for e in events})
    categories = sorted(set(CATEGORY.values()))
    totals = dict.fromkeys([*categories, "idle"], 0.0)
    steps = sorted({e["args"]["step"] for e in events})
    for step in steps:
        batch = [e for e in events if e["args"]["step"] == step]
        span = ranks * (max(e["ts"] + e["dur"] for e in batch) - min(e["ts"] for e in batch))
        if span > 0:
            for category in categories:
                share = sum(e["dur"] for e in batch if e["cat"] == category) / span
                totals[category] += share
                totals["idle"] -= share
            totals["idle"] += 1
    return {category: total / len(steps) for category, total in totals.items()}


def bubble(trace):
    """1 - (forward + backward time) / (ranks x span), the mean over the traced batches."""
    shares = time_shares(trace)
    return 1 - sum(shares[category] for category in COMPUTE)


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


COLOURS = {
    "forward": "tab:blue",
    "backward": "tab:orange",
    "send": "tab:green",
    "recv": "lightgrey",
    "update": "tab:red",
}
LABELS = {"recv": "waiting to receive"}


def is_pipeline_trace(path):
    """True when ``path`` is a Chrome trace of pipeline instructions."""
    if not os.path.exists(path):
        return False
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return any(e.get("ph") == "X" and "micro_batch" in e.get("args", {}) for e in events)


def plot_timeline(trace, path, title="pipeline timeline"):
    """Draw ``trace`` (a Chrome-trace dict of pipeline instructions) to ``path``; returns
    the path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in COLOURS]
    ranks = sorted({e["pid"] for e in events})
    origin = min(e["ts"] for e in events)
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(ranks) + 1.6))
    for row, rank in enumerate(ranks):
        for cat, colour in COLOURS.items():
            bars = [
                ((e["ts"] - origin) / 1e3, e["dur"] / 1e3)
                for e in events
                if e["pid"] == rank and e["cat"] == cat
            ]
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colour)
        for e in events:
            if e["pid"] == rank and e["cat"] in ("forward", "backward") and len(ranks) <= 8:
                centre = (e["ts"] - origin + e["dur"] / 2) / 1e3
                ax.text(centre, row, e["name"], ha="center", va="center", fontsize=6, clip_on=True)
    for cat, colour in COLOURS.items():
        ax.bar(0, 0, color=colour, label=LABELS.get(cat, cat))
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set(xlabel="time (ms)", title=f"{title}: bubble {bubble(trace):.3f}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=len(COLOURS), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
