"""``minidl report RUN_DIR [RUN_DIR ...]``: tables and plots of distributed training runs.

For each run directory (written by ``minidl train``) it prints the per-epoch
table (accuracy, time, throughput, staleness, waiting, bytes); with several
runs, also one comparison line per run. It draws ``report.png`` (in the
first run directory, or ``--out``): test accuracy against training wall time
and against gradients computed, and the staleness histogram of each run. A
pipeline run traced with ``--trace`` also gets ``pipeline_timeline.png`` in its
folder (``perf/pipeline_timeline.py``) and its measured bubble printed. A run's memory
records show each rank's measured bytes next to ``dist.memory``'s prediction. ``--check``
prints instead whether each run finished (``minidl_app/rundir.py``) and exits
1 unless all did.
"""

import itertools
import json
import os
import statistics
from textwrap import indent

from minidl.dist.config import layout_label
from minidl.dist.memory import format_measured, predict_run
from minidl.dist.pipeline.schedules import build
from minidl.perf.pipeline_simulate import simulate, stage_of
from minidl.perf.pipeline_timeline import (
    bubble,
    is_pipeline_trace,
    plot_timeline,
    simulation_trace,
    time_shares,
)
from minidl.perf.telemetry import StalenessHistogram, format_table
from minidl_app.metrics import read_metrics
from minidl_app.rundir import run_status

from . import error_text, flag

# a pipeline trace's categories of the ranks' time, in the words of the report
WHAT = {
    "forward": "forward",
    "backward": "backward",
    "send": "sending",
    "recv": "waiting to receive",
    "update": "updating",
    "idle": "between instructions",
}
EPOCH_COLUMNS = [
    ("epoch", "epoch", "{}"),
    ("test acc %", "test_acc_pct", "{:.2f}"),
    ("seconds", "seconds", "{:.1f}"),
    ("img/s", "images_per_s", "{:.0f}"),
    ("updates/s", "updates_per_s", "{:.1f}"),
    ("staleness mean", "staleness_mean", "{:.2f}"),
    ("staleness max", "staleness_max", "{}"),
    ("worker wait s", "wait_s", "{:.1f}"),
    ("gate wait s", "gate_wait_s", "{:.1f}"),
    ("MiB sent", "mib_sent", "{:.1f}"),
]

RUN_COLUMNS = [
    ("run", "label", "{}"),
    ("epochs", "epochs", "{}"),
    ("epoch s", "epoch_seconds", "{:.1f}"),
    ("img/s", "images_per_s", "{:.0f}"),
    ("final acc %", "final_acc_pct", "{:.2f}"),
    ("staleness mean", "staleness_mean", "{:.2f}"),
    ("staleness max", "staleness_max", "{}"),
    ("wait s/epoch", "wait_s", "{:.1f}"),
    ("MiB/epoch", "mib_sent", "{:.1f}"),
]


def load_run(path):
    """{"path", "label", "config", "epochs": [...], "dist": {epoch: record}, "compression": ...}."""
    metrics = os.path.join(path, "metrics.jsonl")
    if not os.path.exists(metrics):
        raise FileNotFoundError(
            f"minidl report: {path!r} has no metrics.jsonl; pass the --out "
            "folder of a 'minidl train' run"
        )
    records = read_metrics(metrics)
    config, config_path = {}, os.path.join(path, "config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
    label = layout_label(config)
    if config.get("compress", "none") != "none":
        label += f" {config['compress']}"
    if config.get("straggler"):
        label += " straggler " + ",".join(config["straggler"])
    return {
        "path": path,
        "label": label,
        "config": config,
        "epochs": [r for r in records if r.get("kind") == "epoch"],
        "dist": {r["epoch"]: r for r in records if r.get("kind") == "dist"},
        "compression": {r["epoch"]: r for r in records if r.get("kind") == "compression"},
        "memory": [r for r in records if r.get("kind") == "memory"],
        "grid": [r for r in records if r.get("kind") == "grid"],
    }


def epoch_rows(run):
    """One row per epoch, joining the epoch and dist records."""
    rows = []
    for record in run["epochs"]:
        dist = run["dist"].get(record["epoch"], {})
        staleness = dist.get("staleness")
        rows.append(
            {
                "epoch": record["epoch"],
                "test_acc_pct": 100 * record["test_acc"],
                "seconds": record["seconds"],
                "images_per_s": record["images_per_s"],
                "updates_per_s": dist.get("updates_per_s"),
                "staleness_mean": staleness["mean"] if staleness else None,
                "staleness_max": staleness["max"] if staleness else None,
                "wait_s": sum(dist["per_worker"]["wait_s"]) if "per_worker" in dist else None,
                "gate_wait_s": sum(dist["gate_wait_s"]) if "gate_wait_s" in dist else None,
                "mib_sent": dist["bytes_sent"] / 2**20 if "bytes_sent" in dist else None,
                "server_cpu_s": sum(dist["server_cpu_s"]) if "server_cpu_s" in dist else None,
                "gradients": dist.get("gradients"),
            }
        )
    return rows


def run_row(run):
    """The run in one row: mean per epoch, final accuracy, staleness over all epochs."""
    rows = epoch_rows(run)
    if not rows:
        raise ValueError(f"minidl report: {run['path']!r} has no finished epoch yet")

    def mean(key):
        return sum(r[key] for r in rows) / len(rows) if rows[0][key] is not None else None

    histogram = staleness_histogram(run)
    return {
        "label": run["label"],
        "epochs": len(rows),
        "epoch_seconds": mean("seconds"),
        "images_per_s": mean("images_per_s"),
        "final_acc_pct": rows[-1]["test_acc_pct"],
        "staleness_mean": histogram.mean if histogram.count else None,
        "staleness_max": histogram.max if histogram.count else None,
        "wait_s": mean("wait_s"),
        "mib_sent": mean("mib_sent"),
        "server_cpu_s": mean("server_cpu_s"),
    }


def staleness_histogram(run):
    """The staleness histogram of all epochs together."""
    total = StalenessHistogram()
    for record in run["dist"].values():
        if "staleness" in record:
            total.merge(StalenessHistogram(record["staleness"]["histogram"]))
    return total


def plot_runs(runs, path):
    """Accuracy vs wall time, accuracy vs gradients, staleness histograms; returns the path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    stale_runs = any(staleness_histogram(run).count for run in runs)  # else no panel for it
    fig, axes = plt.subplots(1, 2 + stale_runs, figsize=(5 * (2 + stale_runs), 4.2))
    by_time, by_updates, stale = (*axes, None) if not stale_runs else axes
    width = 0.8 / max(len(runs), 1)
    for i, run in enumerate(runs):
        rows = epoch_rows(run)
        accuracy = [r["test_acc_pct"] for r in rows]
        wall = list(itertools.accumulate(r["seconds"] for r in rows))
        gradients = list(itertools.accumulate(r["gradients"] or 0 for r in rows))
        by_time.plot(wall, accuracy, marker="o", label=run["label"])
        if any(gradients):
            by_updates.plot(gradients, accuracy, marker="o", label=run["label"])
        histogram = staleness_histogram(run)
        if stale is not None and histogram.count:
            keys = sorted(histogram.counts)
            fractions = [histogram.counts[k] / histogram.count for k in keys]
            stale.bar([k + i * width for k in keys], fractions, width=width, label=run["label"])
    acc = "test accuracy (%)"
    by_time.set(xlabel="training wall time (s)", ylabel=acc, title="accuracy vs wall time")
    by_updates.set(xlabel="gradients computed", ylabel=acc, title="accuracy vs updates")
    if stale is not None:
        stale.set(xlabel="staleness (server updates between read and apply)", ylabel="fraction")
        stale.set(title="staleness histogram")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report_pipeline_trace(run):
    """A traced pipeline run: its measured bubble beside the formula's and the bubble the
    schedule has with the measured stage costs (``scheduled``), and two timelines: as the
    clock ran, and as scheduled with those costs (readable when ranks outnumber cores)."""
    trace_path = os.path.join(run["path"], "trace.json")
    if not is_pipeline_trace(trace_path):
        return
    with open(trace_path) as f:
        trace = json.load(f)
    title = f"{run['config'].get('schedule')} on {run['config'].get('grid')}"
    print(f"  pipeline bubble, measured over the traced batches: {bubble(trace):.3f}")
    simulation, costs = scheduled(trace, run["config"].get("schedule", "1f1b"))
    slowest = max(range(len(costs)), key=costs.__getitem__)
    print(
        f"  formula (P-1)/(vM+P-1): {simulation.ideal_bubble:.3f}; as scheduled with the "
        f"measured stage costs: {simulation.bubble_fraction:.3f} (forward + backward ms per "
        f"micro-batch by stage: {', '.join(f'{c:.2f}' for c in costs)}; stage {slowest} the "
        "slowest)"
    )
    shares = time_shares(trace)
    print(
        "  the ranks' time: "
        + ", ".join(f"{WHAT[kind]} {shares[kind]:.3f}" for kind in WHAT)
        + " (measured; what is neither compute nor the schedule's bubble is the messages' "
        "cost and the ranks waiting for a core)"
    )
    for name, timeline, what in (
        ("pipeline_timeline.png", trace, title),
        ("pipeline_schedule.png", simulation_trace(simulation), f"{title}, as scheduled"),
    ):
        path = plot_timeline(timeline, os.path.join(run["path"], name), what)
        if path:
            print(f"  timeline: {path}")


def scheduled(trace, schedule):
    """(the ``Simulation`` of ``schedule`` with each stage's mean measured forward and
    backward times, and the stages' forward + backward ms) from a pipeline trace."""
    events = [
        e for e in trace["traceEvents"] if e.get("ph") == "X" and "chunk" in e.get("args", {})
    ]
    ranks = 1 + max(e["pid"] for e in events)
    chunks = 1 + max(e["args"]["chunk"] for e in events)
    micro_batches = 1 + max(e["args"]["micro_batch"] for e in events)
    times = {}  # (kind, stage) -> durations in ms
    for e in events:
        if e["cat"] in ("forward", "backward"):
            stage = stage_of(e["pid"], e["args"]["chunk"], ranks)
            times.setdefault((e["cat"], stage), []).append(e["dur"] / 1e3)
    stages = ranks * chunks
    mean = [
        [statistics.mean(times.get((kind, k), [0.0])) for k in range(stages)]
        for kind in ("forward", "backward")
    ]
    programs = build(schedule, ranks, micro_batches, chunks)
    simulation = simulate(programs, *mean)
    return simulation, [f + b for f, b in zip(*mean)]


def report_grid(run):
    """A grid run's bytes in its last epoch: per rank over tp and dp, and all ranks' halos,
    gather and window gradients on a spatial grid, measured against the prediction
    (``perf.tensor_volume``, the gradients' bytes, ``spatial.step_bytes``)."""
    if not run["grid"]:
        return
    record = run["grid"][-1]
    if "spatial_bytes" in record:  # halos, gather, window gradients: a group's total, shared
        measured, predicted = sum(record["spatial_bytes"]), sum(record["spatial_predicted_bytes"])
        print(
            f"  spatial MiB sent by all ranks in epoch {record['epoch']} ({record['steps']} "
            f"steps), measured/predicted: {measured / 2**20:.2f}/{predicted / 2**20:.2f}"
        )
    for axis in ("tp", "dp"):
        measured, predicted = record[f"{axis}_bytes"], record[f"{axis}_predicted_bytes"]
        if any(measured) or any(predicted):
            mib = ", ".join(f"{m / 2**20:.2f}/{p / 2**20:.2f}" for m, p in zip(measured, predicted))
            print(
                f"  {axis} MiB sent per rank in epoch {record['epoch']} ({record['steps']} steps), "
                f"measured/predicted: {mib}"
            )


def report_memory(run):
    """The last epoch's measured memory per rank, next to what ``dist.memory`` predicts for
    the run's options."""
    if not run["memory"]:
        return
    try:
        predicted = predict_run(run["config"])
    except (ValueError, KeyError, TypeError) as exc:
        predicted = f"no prediction: {error_text(exc)}"
    print(indent(format_measured(run["memory"][-1], predicted), "  "))


def add_report_arguments(p):
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories of minidl train")
    plot = "where to write the plot (default RUN_DIR/report.png of the first run)"
    p.add_argument("--out", help=plot)
    p.add_argument(
        "--check",
        action="store_true",
        help="only say whether each run finished, aborted or was stopped (one line each); "
        "exit 1 unless every run finished: for batch scripts, as a launcher may exit 0 "
        "after losing a node",
    )


def run_report(args):
    if args.check:
        finished = [run_status(path, flag) for path in args.runs]
        for _, line in finished:
            print(line)
        return 0 if all(done for done, _ in finished) else 1
    runs = [load_run(path) for path in args.runs]
    for run in runs:
        print(f"{run['label']}  ({run['path']})")
        rows = epoch_rows(run)
        shown = [c for c in EPOCH_COLUMNS if any(row[c[1]] is not None for row in rows)]
        print(format_table(rows, shown))  # what this layout measured: no empty columns
        record = next(iter(run["compression"].values()), None)
        if record is not None:
            print(
                f"  compression {record['scheme']}: {record['payload_bytes_per_step']} bytes "
                f"per step, {100 * record['ratio']:.2f}% of float32"
            )
        report_grid(run)
        report_pipeline_trace(run)
        report_memory(run)
        print()
    if len(runs) > 1:
        print(format_table([run_row(run) for run in runs], RUN_COLUMNS))
    path = plot_runs(runs, args.out or os.path.join(args.runs[0], "report.png"))
    if path:
        print(f"plot: {path}")
    return 0
