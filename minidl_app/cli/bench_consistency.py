"""``minidl bench consistency`` and ``minidl bench compression``: the experiments, one command each.

consistency: LeNet-5 on Fashion-MNIST under bsp, ssp:2, asp and avg:4 with n workers (n + 1
ranks with a server), the last slowed FACTOR times by sleeping (so 2 cores suffice); per
mode the medians of epoch time and throughput, final accuracy, staleness, waiting and
bytes, then the target ratios.

compression: synchronous SGD with each gradient compressor against float32: accuracy
and bytes per step; the target is top-k 1% within 1 point of float32 on <= 5% of its bytes.

Each configuration is a real ``mpiexec ... minidl train`` run, kept under ``--out``.
"""

import os
import statistics

from minidl.perf.telemetry import format_table
from minidl_app.launch import run_mpi

from .report import load_run, run_row

CONSISTENCY_COLUMNS = [
    ("mode", "mode", "{}"),
    ("poll s", "poll", "{}"),
    ("epoch s", "epoch_seconds", "{:.1f}"),
    ("img/s", "images_per_s", "{:.0f}"),
    ("vs bsp", "speedup", "{:.2f}x"),
    ("final acc %", "final_acc_pct", "{:.2f}"),
    ("acc - bsp", "acc_gap", "{:+.2f}"),
    ("staleness mean", "staleness_mean", "{:.2f}"),
    ("staleness max", "staleness_max", "{}"),
    ("wait s/epoch", "wait_s", "{:.1f}"),
    ("server cpu s/epoch", "server_cpu_s", "{:.1f}"),
    ("MiB/epoch", "mib_sent", "{:.1f}"),
]
COMPRESSION_COLUMNS = [
    ("scheme", "scheme", "{}"),
    ("final acc %", "final_acc_pct", "{:.2f}"),
    ("acc - fp32", "acc_gap", "{:+.2f}"),
    ("bytes/step", "bytes_per_step", "{:.0f}"),
    ("% of fp32", "bytes_pct", "{:.2f}"),
    ("epoch s", "epoch_seconds", "{:.1f}"),
]


def _add_common(p, epochs):
    add = p.add_argument
    add("--workers", type=int, default=2)
    add("--epochs", type=int, default=epochs)
    add("--subset", type=int, help="first N training images")
    add("--batch-size", type=int, default=64)
    add("--optimizer", default="momentum")
    add("--lr", type=float, default=0.01)
    add("--repeats", type=int, default=1, help="runs per configuration (medians)")
    add("--data-dir")
    add("--out", default="runs/bench", help="folder of the run directories")
    add("--timeout", type=float, default=1800, help="seconds per run")
    return add


def add_consistency_arguments(p):
    add = _add_common(p, epochs=3)
    add("--modes", default="bsp,ssp:2,asp,avg:4")
    add("--factor", type=float, default=2.0, help="slowdown of the last worker")
    add("--jitter", type=float, default=0.0, help="seconds, mean, every worker")
    polls = "comma-separated --poll-interval values to compare (0: blocking waits)"
    add("--poll-intervals", help=polls)


def add_compression_arguments(p):
    # 5 epochs: error feedback delays the small coordinates, so top-k trails
    # float32 early on (-2.8 points after 2 epochs here, -0.55 after 5)
    add = _add_common(p, epochs=5)
    add("--schemes", default="none,topk:0.01,fp16,qsgd:4,terngrad,sign")


def train(nprocs, options, out, timeout):
    """One ``mpiexec -n nprocs minidl train`` run into ``out``; returns ``load_run(out)``."""
    args = ["-m", "minidl", "train", "--model", "lenet5", "--conv-algo", "im2col", "--no-progress"]
    args += ["--out", out, *options]
    result = run_mpi(nprocs, args, timeout=timeout, env={"OPENBLAS_NUM_THREADS": "1"})
    if result.timed_out or result.returncode != 0:
        raise RuntimeError(
            f"minidl train {' '.join(options)} failed "
            f"({'timed out' if result.timed_out else result.returncode}):\n"
            f"{result.output[-3000:]}"
        )
    return load_run(out)


def _common_options(args):
    options = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
    options += ["--optimizer", args.optimizer, "--lr", str(args.lr)]
    if args.subset:
        options += ["--subset", str(args.subset)]
    if args.data_dir:
        options += ["--data-dir", args.data_dir]
    return options


def _median_row(runs):
    """Medians over repeats of the numeric columns of ``run_row``."""
    rows = [run_row(run) for run in runs]
    merged = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (int, float)):
            merged[key] = statistics.median(r[key] for r in rows)
    return merged


def run_consistency(args):
    """Run every mode (and poll interval) ``--repeats`` times; print the table and the targets.
    Repeats are interleaved, so load from other processes falls on all configurations alike."""
    polls = args.poll_intervals.split(",") if args.poll_intervals else [None]
    configs = [(mode, poll) for mode in args.modes.split(",") for poll in polls]
    runs = {config: [] for config in configs}
    for repeat in range(args.repeats):
        for mode, poll in configs:
            uses_server = not (mode.startswith("avg") or mode == "sync")
            nprocs = args.workers + (1 if uses_server else 0)
            options = _common_options(args) + ["--dist", mode]
            options += ["--straggler", f"{nprocs - 1}:{args.factor}"]
            if args.jitter:
                options += ["--jitter", str(args.jitter)]
            if poll is not None:
                options += ["--poll-interval", poll]
            name = f"{mode.replace(':', '')}-poll{poll or 'default'}-{repeat}"
            run = train(nprocs, options, os.path.join(args.out, name), args.timeout)
            runs[(mode, poll)].append(run)
            print(f"  {name}: {run_row(run)['images_per_s']:.0f} img/s", flush=True)
    rows = [
        dict(_median_row(runs[(mode, poll)]), mode=mode, poll=poll or "default")
        for mode, poll in configs
    ]
    print(
        f"\n{args.workers} workers, the last slowed {args.factor}x"
        + (f", jitter {args.jitter} s" if args.jitter else "")
        + f", {args.epochs} epochs, medians of {args.repeats} run(s)"
    )
    print(format_table(_with_baseline(rows), CONSISTENCY_COLUMNS))
    print(consistency_targets(rows))
    return 0


def _with_baseline(rows):
    """Add speed-up and accuracy gap against the bsp row of the same poll interval."""
    for row in rows:
        base = next((r for r in rows if r["mode"] == "bsp" and r["poll"] == row["poll"]), None)
        if base is not None:
            row["speedup"] = row["images_per_s"] / base["images_per_s"]
            row["acc_gap"] = row["final_acc_pct"] - base["final_acc_pct"]
    return rows


def consistency_targets(rows):
    """The brief's targets, measured: throughput ratios and accuracy gaps."""
    by_mode = {r["mode"]: r for r in rows if r["poll"] == rows[0]["poll"]}
    lines = ["targets:"]
    if {"bsp", "ssp:2"} <= by_mode.keys():
        ratio = by_mode["ssp:2"]["images_per_s"] / by_mode["bsp"]["images_per_s"]
        lines.append(_target(f"ssp:2 / bsp throughput {ratio:.2f}x (target >= 1.3x)", ratio >= 1.3))
    if {"asp", "ssp:2"} <= by_mode.keys():
        ratio = by_mode["asp"]["images_per_s"] / by_mode["ssp:2"]["images_per_s"]
        lines.append(_target(f"asp / ssp:2 throughput {ratio:.2f}x (target >= 1)", ratio >= 1))
    for mode in ("ssp:2", "asp", "avg:4"):
        if mode in by_mode and "bsp" in by_mode:
            gap = by_mode[mode]["final_acc_pct"] - by_mode["bsp"]["final_acc_pct"]
            text = f"{mode} accuracy {gap:+.2f} points vs bsp (target within 1.5)"
            lines.append(_target(text, abs(gap) <= 1.5 or gap > 0))
    return "\n  ".join(lines)  # a target a line, indented under "targets:"


def _target(text, met):
    return f"{text}: {'met' if met else 'missed'}"


def run_compression(args):
    """Synchronous SGD with each scheme; print accuracy and bytes against float32."""
    rows = []
    for scheme in args.schemes.split(","):
        runs = []
        for repeat in range(args.repeats):
            name = f"sync-{scheme.replace(':', '')}-{repeat}"
            options = _common_options(args) + ["--dist", "sync", "--compress", scheme]
            runs.append(train(args.workers, options, os.path.join(args.out, name), args.timeout))
        record = next(iter(runs[0]["compression"].values()), None)
        nbytes = record["payload_bytes_per_step"] if record else None
        full = record["float32_bytes_per_step"] if record else nbytes
        rows.append(dict(_median_row(runs), scheme=scheme, bytes_per_step=nbytes, float32=full))
    float32 = next((r for r in rows if r["scheme"] == "none"), None)
    full = next((r["float32"] for r in rows if r["float32"]), None)
    if float32 is not None:
        for row in rows:
            row["acc_gap"] = row["final_acc_pct"] - float32["final_acc_pct"]
            row["bytes_per_step"] = row["bytes_per_step"] or full
            row["bytes_pct"] = 100 * row["bytes_per_step"] / full if full else None
    print(f"\nsync SGD on {args.workers} ranks, {args.epochs} epochs, medians of {args.repeats}")
    print(format_table(rows, COMPRESSION_COLUMNS))
    top = next((r for r in rows if r["scheme"] == "topk:0.01"), None)
    if top is not None and float32 is not None:
        text = (
            f"target: top-k 1% with error feedback {top['acc_gap']:+.2f} points vs float32 "
            f"(within 1), {top['bytes_pct']:.2f}% of the bytes (<= 5%)"
        )
        print(_target(text, top["acc_gap"] >= -1 and top["bytes_pct"] <= 5))
    return 0
