"""Chrome-trace timelines: the event format, the no-op default, merging ranks, a traced run."""

import json
import time

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import models, optim
from minidl.perf import trace
from minidl.perf.training_trace import TrainingTrace


def complete_events(trace_json):
    return [e for e in trace_json["traceEvents"] if e["ph"] == "X"]


def test_span_records_a_complete_event_in_microseconds():
    tracer = trace.Tracer(rank=3)
    with tracer.span("allreduce", cat="comm", bytes=1024):
        time.sleep(0.01)
    tracer.instant("ssp gate", cat="wait", clock=7)
    data = json.loads(json.dumps(tracer.to_json()))
    (span,) = complete_events(data)
    assert span["pid"] == 3 and span["name"] == "allreduce" and span["args"] == {"bytes": 1024}
    assert 10_000 <= span["dur"] < 1_000_000  # microseconds
    (gate,) = [e for e in data["traceEvents"] if e["ph"] == "i"]
    assert gate["tid"] != span["tid"] and gate["ts"] >= span["ts"] + span["dur"]
    names = {
        (e["tid"], e["args"]["name"]) for e in data["traceEvents"] if e["name"] == "thread_name"
    }
    assert names == {(span["tid"], "comm"), (gate["tid"], "wait")}


def test_module_level_tracing_is_off_until_enabled():
    assert trace.current() is None
    first, second = trace.span("x"), trace.span("y", cat="comm")
    assert first is second  # the shared no-op, nothing allocated
    with first:
        trace.instant("nothing")
    tracer = trace.enable(rank=1)
    try:
        with trace.span("step", cat="compute"):
            trace.instant("inside")
    finally:
        assert trace.disable() is tracer
    assert [e["name"] for e in tracer.events] == ["inside", "step"]


def test_merge_puts_every_rank_in_one_valid_trace():
    parts = []
    for rank in range(3):
        tracer = trace.Tracer(rank)
        with tracer.span(f"work {rank}", cat="forward"):
            pass
        parts.append(tracer.to_json())
    merged = json.loads(json.dumps(trace.merge(parts)))
    events = complete_events(merged)
    assert sorted(e["pid"] for e in events) == [0, 1, 2]
    assert min(e["ts"] for e in events) == 0
    processes = {e["pid"] for e in merged["traceEvents"] if e["name"] == "process_name"}
    assert processes == {0, 1, 2}
    with pytest.raises(ValueError, match="rank \\(pid\\) 1"):
        trace.merge([parts[1], parts[1]])


class FakeComm:
    """Rank and size of one process of a 2-rank run; barriers are no-ops (ranks run in turn)."""

    def __init__(self, rank):
        self.rank, self.size = rank, 2

    def barrier(self):
        pass


def test_run_trace_of_two_ranks_is_merged_by_rank_zero(tmp_path):
    tracers = [trace.Tracer(rank) for rank in (0, 1)]
    for t in tracers:
        with t.span("allreduce", cat="comm"):
            pass
    trace.write_run_trace(tracers[1], tmp_path, FakeComm(1))  # rank 1 writes its part first
    path = trace.write_run_trace(tracers[0], tmp_path, FakeComm(0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]
    with open(path) as f:
        assert {e["pid"] for e in complete_events(json.load(f))} == {0, 1}


def test_traced_training_steps_show_every_layer_and_the_update(tmp_path):
    model = models.mlp(hidden=(32,))
    opt = optim.Momentum(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x, y = md.tensor(rng.standard_normal((16, 1, 28, 28))), rng.integers(0, 10, 16)
    recording = TrainingTrace(model, opt).start()
    for _ in range(2):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with open(recording.finish(tmp_path)) as f:
        events = complete_events(json.load(f))
    assert "forward" not in model[1].__dict__ and "step" not in opt.__dict__  # restored
    names = {(e["cat"], e["name"]) for e in events}
    assert {("forward", str(i)) for i in range(4)} <= names
    assert {
        ("backward", "1"),
        ("backward", "2"),
        ("backward", "3"),
    } <= names  # layer 1: first with params
    assert sum(1 for e in events if e["name"] == "optimizer.step") == 2
    fwd = [e for e in events if e["cat"] == "forward"]
    bwd = [e for e in events if e["cat"] == "backward"]
    assert max(e["ts"] for e in fwd[:4]) < min(e["ts"] for e in bwd)  # backward after forward
