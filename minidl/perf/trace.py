"""Timelines of runs in the Chrome trace event format (open them in Perfetto or chrome://tracing).

Each event is a "complete" event (``"ph": "X"``, ``ts`` and ``dur`` in
microseconds) or an instant (``"ph": "i"``); ``pid`` is the MPI rank and
``tid`` one track per category ("forward", "backward", "update", "comm",
"wait", ...), named by metadata events. Times are wall-clock microseconds,
so the files of ranks on one host line up; ``merge`` puts every rank's
events in one file and starts the time axis at the earliest event.

The module-level functions talk to one process-wide tracer that is off
until ``enable()``; while it is off, ``span`` returns a shared no-op context
manager and ``instant`` returns at once, so code can keep its trace points::

    from minidl.perf import trace
    with trace.span("allreduce", cat="comm", bytes=n):
        ...
    trace.instant("ssp gate", cat="wait")
"""

import contextlib
import json
import os
import time

CATEGORY_ORDER = ("step", "forward", "backward", "update", "comm", "wait", "data", "compute")


class _Span:
    """Context manager that records one complete event when it exits."""

    __slots__ = ("tracer", "name", "cat", "args", "start")

    def __init__(self, tracer, name, cat, args):
        self.tracer, self.name, self.cat, self.args = tracer, name, cat, args

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.tracer.complete(self.name, self.cat, self.start, time.perf_counter(), **self.args)
        return False


class Tracer:
    """The events of one rank; ``complete`` takes ``time.perf_counter()`` seconds."""

    def __init__(self, rank=0):
        self.rank = rank
        self.events = []
        self._tids = {}
        # wall-clock microseconds at perf_counter() == 0, so ranks share one time axis
        self._offset_us = time.time() * 1e6 - time.perf_counter() * 1e6

    def tid(self, cat):
        """The track of a category (a stable small integer; known categories first)."""
        if cat not in self._tids:
            others = sum(1 for c in self._tids if c not in CATEGORY_ORDER)
            self._tids[cat] = (
                CATEGORY_ORDER.index(cat) if cat in CATEGORY_ORDER else len(CATEGORY_ORDER) + others
            )
        return self._tids[cat]

    def complete(self, name, cat, start, end, **args):
        """An event from ``start`` to ``end`` (``time.perf_counter()`` seconds)."""
        event = {
            "name": name,
            "cat": cat,
            "ph": "X",
            "pid": self.rank,
            "tid": self.tid(cat),
            "ts": start * 1e6 + self._offset_us,
            "dur": max(end - start, 0.0) * 1e6,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    def span(self, name, cat="compute", **args):
        return _Span(self, name, cat, args)

    def instant(self, name, cat="compute", **args):
        event = {
            "name": name,
            "cat": cat,
            "ph": "i",
            "s": "t",
            "pid": self.rank,
            "tid": self.tid(cat),
            "ts": time.perf_counter() * 1e6 + self._offset_us,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    def metadata(self):
        """Events naming this rank's process and its category tracks."""
        meta = [
            {
                "name": "process_name",
                "ph": "M",
                "pid": self.rank,
                "args": {"name": f"rank {self.rank}"},
            },
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": self.rank,
                "args": {"sort_index": self.rank},
            },
        ]
        for cat, tid in self._tids.items():
            meta.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": self.rank,
                    "tid": tid,
                    "args": {"name": cat},
                }
            )
            meta.append(
                {
                    "name": "thread_sort_index",
                    "ph": "M",
                    "pid": self.rank,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return meta

    def to_json(self):
        """This rank's trace as a Chrome-trace JSON object."""
        return {"traceEvents": self.metadata() + self.events, "displayTimeUnit": "ms"}

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_json(), f)
        return path


def merge(traces):
    """One trace from several (JSON objects or file paths), time axis starting at 0.

    Ranks must be distinct: two traces with events of the same ``pid`` are
    an error (they would overlay each other in the viewer).
    """
    loaded = []
    for t in traces:
        if isinstance(t, (str, os.PathLike)):
            with open(t) as f:
                t = json.load(f)
        loaded.append(t["traceEvents"] if isinstance(t, dict) else list(t))
    owner = {}
    for i, events in enumerate(loaded):
        for pid in {e["pid"] for e in events}:
            if owner.setdefault(pid, i) != i:
                raise ValueError(
                    f"trace merge: traces {owner[pid]} and {i} both hold events of "
                    f"rank (pid) {pid}; merge the traces of distinct ranks"
                )
    timed = [e for events in loaded for e in events if "ts" in e]
    origin = min((e["ts"] for e in timed), default=0.0)
    merged = []
    for events in loaded:
        for e in events:
            merged.append(dict(e, ts=e["ts"] - origin) if "ts" in e else dict(e))
    return {"traceEvents": merged, "displayTimeUnit": "ms"}


def write_run_trace(tracer, directory, comm=None, name="trace.json"):
    """Write ``directory/name`` with every rank's events; collective when ``comm`` is given.

    Each rank saves its part next to the final file; after a barrier rank 0
    merges the parts and removes them. Returns the path (on every rank).
    """
    path = os.path.join(directory, name)
    if comm is None or comm.size == 1:
        with open(path, "w") as f:
            json.dump(merge([tracer.to_json()]), f)
        return path
    part = os.path.join(directory, f"{name}.rank{comm.rank}")
    tracer.save(part)
    comm.barrier()
    if comm.rank == 0:
        parts = [os.path.join(directory, f"{name}.rank{r}") for r in range(comm.size)]
        with open(path, "w") as f:
            json.dump(merge(parts), f)
        for p in parts:
            os.remove(p)
    comm.barrier()
    return path


# ------------------------------------------------------------- process-wide tracer
_NULL_SPAN = contextlib.nullcontext()
_tracer = None


def enable(rank=0):
    """Start recording in this process (as ``rank``); returns the tracer."""
    global _tracer
    _tracer = Tracer(rank)
    return _tracer


def disable():
    """Stop recording; returns the tracer that was recording (or None)."""
    global _tracer
    tracer, _tracer = _tracer, None
    return tracer


def current():
    """The recording tracer, or None when tracing is off."""
    return _tracer


def span(name, cat="compute", **args):
    """``with span(...):`` records a complete event; a no-op while tracing is off."""
    return _NULL_SPAN if _tracer is None else _tracer.span(name, cat, **args)


def instant(name, cat="compute", **args):
    """Record an instant event now; nothing while tracing is off."""
    if _tracer is not None:
        _tracer.instant(name, cat, **args)
