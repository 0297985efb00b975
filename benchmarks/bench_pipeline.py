"""Pipeline bubble and activation memory of LeNet-5 at P = 4, M = 8, in simulated time.

Each of LeNet-5's twelve layers is timed forward and backward on one micro-batch
(median of ``--repeats`` rounds after a warm-up); the model is cut into P stages
(P x v for interleaved 1F1B) two ways: where the largest stage's measured time
is smallest, and by parameter count. The simulator then runs naive, GPipe,
1F1B and interleaved 1F1B with those per-stage forward and backward times and
reports the bubble (idle share of P x makespan) beside the textbook formula for
equal stages, and each rank's peak live activations in micro-batches and KiB
(the stage's input and every layer's output, per micro-batch held).

With ``--balanced`` the model is instead a stack of 2P x v equal blocks
(Linear(W, W) and ReLU; ``--width W``), so the stages are balanced and the
measured bubble can be set against the formula; PipeDream joins the schedules
(its bubble is 1F1B's: the same order, with an update after each backward).
``--timelines DIR`` writes each schedule's simulated Chrome trace and PNG
timeline there.

Wall-clock bubbles on a machine with fewer cores than ranks measure the
operating system's scheduler, so every time here is simulated from measured
per-stage costs.

Run: ``python benchmarks/bench_pipeline.py [--batch-size 64] [--repeats 20]
[--balanced] [--timelines DIR]``.
"""

import argparse
import json
import os
import statistics

import numpy as np

import minidl as md
from minidl import layers as L
from minidl.backend import limit_threads
from minidl.dist.pipeline import build, cut_by_cost, partition
from minidl.perf import pipeline_profile as prof
from minidl.perf.pipeline_simulate import ideal_bubble, simulate
from minidl.perf.pipeline_timeline import plot_timeline, simulation_trace

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved")
BALANCED_SCHEDULES = ("gpipe", "1f1b", "interleaved", "pipedream")


def balanced_model(blocks, width):
    """``blocks`` equal blocks Linear(width, width), ReLU: stages of whole blocks are equal."""
    md.manual_seed(0)
    layers = []
    for _ in range(blocks):
        layers += [L.Linear(width, width), L.ReLU()]
    return L.Sequential(*layers)


def write_timeline(directory, name, run):
    """The simulated run's Chrome trace and PNG timeline in ``directory``."""
    os.makedirs(directory, exist_ok=True)
    trace = simulation_trace(run, unit_seconds=1.0)  # the costs are in seconds already
    with open(os.path.join(directory, f"{name}.json"), "w") as f:
        json.dump(trace, f)
    plot_timeline(trace, os.path.join(directory, f"{name}.png"), f"{name} (simulated)")


def formula(schedule, p, m, v):
    return (p - 1) / p if schedule == "naive" else ideal_bubble(p, m, v)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--balanced", action="store_true", help="equal blocks, not LeNet-5")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--timelines", metavar="DIR", help="write simulated traces and PNGs")
    args = parser.parse_args()
    limit_threads(args.threads)
    p, m = args.ranks, args.micro_batches
    rng = np.random.default_rng(0)
    if args.balanced:
        model = balanced_model(2 * p * args.chunks, args.width)
        x = rng.standard_normal((args.batch_size // m, args.width)).astype(np.float32)
        name, cuts, schedules = (
            f"{len(model) // 2} blocks of width {args.width}",
            ("time",),
            (BALANCED_SCHEDULES),
        )
    else:
        model = md.models.lenet5()
        x = rng.standard_normal((args.batch_size // m, 1, 28, 28)).astype(np.float32)
        name, cuts, schedules = "LeNet-5", ("time", "parameters"), SCHEDULES
    times = prof.layer_times(model, x, args.repeats)
    total = sum(f + b for f, b in times)
    print(
        f"{name}, micro-batch of {len(x)} rows, {args.threads} thread(s): "
        f"{total * 1e3:.3f} ms forward+backward"
    )
    print("per layer (ms, fwd/bwd): " + ", ".join(f"{f * 1e3:.3f}/{b * 1e3:.3f}" for f, b in times))
    print(
        "\n| cut | schedule | stages (layers) | balance | bubble (measured costs) | "
        "formula | makespan ms | peak micro-batches per rank | peak KiB per rank |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for cut_name in cuts:
        for schedule in schedules:
            v = args.chunks if schedule == "interleaved" else 1
            if cut_name == "time":
                cut = cut_by_cost([f + b for f, b in times], p * v)
            else:
                cut = partition(model, p * v, by="parameters")
            forward, backward = prof.stage_costs(times, cut)
            run = simulate(build(schedule, p, m, v), forward, backward)
            if args.timelines and cut_name == "time":
                write_timeline(args.timelines, schedule, run)
            kib = prof.peak_bytes(run, prof.activation_bytes(model, x, cut))
            per_stage = [f + b for f, b in zip(forward, backward)]
            balance = max(per_stage) / statistics.mean(per_stage)
            print(
                f"| {cut_name} | {schedule}{f' v={v}' if v > 1 else ''} | "
                f"{' '.join(f'{a}-{b - 1}' for a, b in cut.bounds)} | {balance:.2f} | "
                f"**{run.bubble_fraction:.3f}** | {formula(schedule, p, m, v):.3f} | "
                f"{run.makespan * 1e3:.2f} | {list(run.peak_live)} | "
                f"{[round(k / 1024) for k in kib]} |"
            )


if __name__ == "__main__":
    main()
