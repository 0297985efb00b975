"""The PNG of a pipeline timeline: one row per rank, time to the right, each instruction a
bar coloured by kind (forward, backward, send, waiting to receive, update); white is idle.
``minidl report`` draws it for a run traced with ``--grid ...,pp=P --trace``."""

import json
import os

from minidl.perf.pipeline_timeline import bubble

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
