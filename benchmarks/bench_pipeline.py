"""Pipeline bubble and activation memory of LeNet-5 at P = 4, M = 8, in simulated time.

Each of LeNet-5's twelve layers is timed forward and backward on one micro-batch
(median of ``--repeats`` rounds after a warm-up); the model is cut into P stages
(P x v for interleaved 1F1B) two ways: where the largest stage's measured time
is smallest, and by parameter count. The simulator then runs naive, GPipe,
1F1B and interleaved 1F1B with those per-stage forward and backward times and
reports the bubble (idle share of P x makespan) beside the textbook formula for
equal stages, and each rank's peak live activations in micro-batches and KiB
(the stage's input and every layer's output, per micro-batch held).

Wall-clock bubbles on a machine with fewer cores than ranks measure the
operating system's scheduler, so every time here is simulated from measured
per-stage costs.

Run: ``python benchmarks/bench_pipeline.py [--batch-size 64] [--repeats 20]``.
"""

import argparse
import statistics

import numpy as np

import minidl as md
from minidl.backend import limit_threads
from minidl.dist.pipeline import build, partition
from minidl.dist.pipeline import profile as prof
from minidl.dist.pipeline.simulate import ideal_bubble, simulate

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved")


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
    args = parser.parse_args()
    limit_threads(args.threads)
    p, m = args.ranks, args.micro_batches
    model = md.models.lenet5()
    x = np.random.default_rng(0).standard_normal((args.batch_size // m, 1, 28, 28))
    x = x.astype(np.float32)
    times = prof.layer_times(model, x, args.repeats)
    total = sum(f + b for f, b in times)
    print(
        f"LeNet-5, micro-batch of {len(x)} images, {args.threads} thread(s): "
        f"{total * 1e3:.3f} ms forward+backward"
    )
    print("per layer (ms, fwd/bwd): " + ", ".join(f"{f * 1e3:.3f}/{b * 1e3:.3f}" for f, b in times))
    print(
        "\n| cut | schedule | stages (layers) | balance | bubble (measured costs) | "
        "formula | makespan ms | peak micro-batches per rank | peak KiB per rank |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for cut_name in ("time", "parameters"):
        for schedule in SCHEDULES:
            v = args.chunks if schedule == "interleaved" else 1
            if cut_name == "time":
                cut = prof.cut_by_cost([f + b for f, b in times], p * v)
            else:
                cut = partition(model, p * v, by="parameters")
            forward, backward = prof.stage_costs(times, cut)
            run = simulate(build(schedule, p, m, v), forward, backward)
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
