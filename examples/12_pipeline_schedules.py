"""Pipeline schedules on LeNet-5: naive, GPipe, 1F1B, PipeDream and interleaved 1F1B.

LeNet-5's twelve layers are cut into P stages (four by default) where the
measured time per stage is most even; a batch is split into M micro-batches.
For each schedule the script prints

- the textbook bubble: (P-1)/P for naive, (P-1)/(M+P-1) for GPipe and 1F1B,
  (P-1)/(vM+P-1) for interleaved 1F1B with v model chunks per rank;
- the bubble the simulator finds with equal stages (it equals the formula) and
  with the per-stage costs measured from LeNet-5's layers (the slowest stage
  sets the pace, so the bubble grows);
- the peak live activations per rank, in micro-batches and in KiB: GPipe
  holds all M, 1F1B (and PipeDream, in the same order) at most P - s on stage s.

Alone (``python examples/12_pipeline_schedules.py``) everything is simulated.
Under ``mpiexec -n 4`` the ranks also train a few steps with each schedule
(``PipelineTrainer``, random images), trace them (``perf.pipeline_timeline``) and print the
bubble measured in wall-clock time beside it; with more ranks than cores, that
figure measures the operating system's scheduler as much as the pipeline.
``--png FILE`` draws the simulated timelines and each rank's peak activation
memory per schedule (needs matplotlib; skipped without it).

Quick run: ``--micro-batches 8 --batch-size 32 --repeats 1`` (a few seconds).
"""

import argparse

import numpy as np

import minidl as md
from minidl import optim
from minidl.dist.job import mpiexec_ranks
from minidl.dist.pipeline import PipelineTrainer, build, cut_by_cost
from minidl.perf import pipeline_profile as prof
from minidl.perf.pipeline_simulate import ideal_bubble, simulate
from minidl.perf.pipeline_timeline import bubble
from minidl.perf.trace import Tracer, merge

SCHEDULES = ("naive", "gpipe", "1f1b", "pipedream", "interleaved")


def formula(schedule, p, m, v):
    """The textbook bubble of ``schedule`` with P ranks, M micro-batches, v chunks."""
    return (p - 1) / p if schedule == "naive" else ideal_bubble(p, m, v)


def runnable(p, args):
    """The schedules that fit: interleaved needs M to be a multiple of P."""
    return SCHEDULES if args.micro_batches % p == 0 else SCHEDULES[:-1]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4, help="P when run alone (default 4)")
    parser.add_argument("--micro-batches", type=int, default=8, help="M (default 8)")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per batch (default 64)")
    parser.add_argument("--chunks", type=int, default=2, help="v of interleaved (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timing rounds per layer")
    parser.add_argument("--steps", type=int, default=3, help="training steps under mpiexec")
    parser.add_argument("--png", help="draw the simulated timelines into this PNG")
    return parser.parse_args()


def plan(p, args):
    """Per schedule: the programs, the cut and the simulated runs (equal and measured costs)."""
    model = md.models.lenet5()
    x = np.random.default_rng(0).standard_normal((args.batch_size // args.micro_batches, 1, 28, 28))
    x = x.astype(np.float32)
    times = prof.layer_times(model, x, args.repeats)
    rows = []
    for schedule in runnable(p, args):
        v = args.chunks if schedule == "interleaved" else 1
        programs = build(schedule, p, args.micro_batches, v)
        cut = cut_by_cost([f + b for f, b in times], p * v)
        forward, backward = prof.stage_costs(times, cut)
        equal = simulate(programs)
        measured = simulate(programs, forward, backward)
        kib = [b / 1024 for b in prof.peak_bytes(measured, prof.activation_bytes(model, x, cut))]
        rows.append((schedule, v, cut, equal, measured, kib))
    return rows


def report(p, args, rows, wall=None):
    m = args.micro_batches
    print(f"LeNet-5 on P={p} ranks, M={m} micro-batches of {args.batch_size // m} images,")
    print(f"interleaved with v={args.chunks} chunks per rank; stages cut by measured time:")
    for schedule, _, cut, *_ in rows:
        print(f"  {schedule:<11} stages {list(cut.bounds)} balance {cut.balance:.2f}")
    header = "schedule     formula  simulated  measured-costs"
    header += "  wall-clock" if wall else ""
    print(header + "  peak live per rank  peak KiB per rank")
    for schedule, v, _, equal, measured, kib in rows:
        line = f"{schedule:<11}  {formula(schedule, p, m, v):.4f}   {equal.bubble_fraction:.4f}"
        line += f"     {measured.bubble_fraction:.4f}          "
        line += f"{wall[schedule]:.4f}      " if wall else ""
        line += f"{list(equal.peak_live)!s:<18}  [{', '.join(f'{k:.0f}' for k in kib)}]"
        print(line)
    if m % p:
        print(f"interleaved: skipped, M={m} is not a multiple of P={p}")
    print("(bubble = idle share of P x makespan; 'simulated': equal stages, 'measured-costs':")
    print(" each stage's forward and backward took the time measured from its layers)")


def measure_wall(comm, args):
    """Train ``args.steps`` steps per schedule; the bubble of their traced timeline."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((args.batch_size, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, args.batch_size)
    wall = {}
    for schedule in runnable(comm.size, args):
        md.manual_seed(0)
        trainer = PipelineTrainer(
            md.models.lenet5(),
            comm,
            optimizer=lambda ps: optim.SGD(ps, lr=0.01),
            micro_batches=args.micro_batches,
            schedule=schedule,
            chunks=args.chunks if schedule == "interleaved" else 1,
        )
        tracer = Tracer(comm.rank)
        trainer.executor.trace(tracer, skip=1, steps=args.steps)  # after a warm-up step
        for _ in range(args.steps + 1):
            trainer.step(x, y)
        wall[schedule] = bubble(merge(comm.allgather_object(tracer.to_json())))
    return wall


def draw(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no timeline PNG")
        return
    fig, axes = plt.subplots(len(rows) + 1, 1, figsize=(10, 2 * len(rows) + 2.5), squeeze=False)
    for ax, (schedule, _, _, _, measured, _) in zip(axes[:-1, 0], rows):
        for rank, events in enumerate(measured.timeline):
            for e in events:
                forward = e.instruction.op == "forward"
                color = "tab:blue" if forward else "tab:orange"
                alpha = 1.0 if e.instruction.chunk == 0 else 0.5
                ax.barh(rank, e.end - e.start, left=e.start, color=color, alpha=alpha)
        ax.set_title(f"{schedule}: bubble {measured.bubble_fraction:.3f}", fontsize=9)
        ax.set_yticks(range(measured.ranks))
        ax.invert_yaxis()
        ax.set_ylabel("rank")
    axes[-2, 0].set_xlabel("simulated seconds (forward blue, backward orange)")
    memory, width = axes[-1, 0], 0.8 / len(rows)
    for i, (schedule, _, _, _, _, kib) in enumerate(rows):
        memory.bar([r + i * width for r in range(len(kib))], kib, width=width, label=schedule)
    memory.set(xlabel="rank", ylabel="peak activations (KiB)", title="activation memory")
    memory.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"timelines written to {path}")


def main():
    args = parse_args()
    if args.batch_size < args.micro_batches:
        raise SystemExit("--batch-size must be at least --micro-batches")
    comm = md.dist.init() if mpiexec_ranks() > 1 else None
    p = comm.size if comm is not None else args.ranks
    wall = measure_wall(comm, args) if comm is not None else None
    if comm is None or comm.rank == 0:
        rows = plan(p, args)
        report(p, args, rows, wall)
        if args.png:
            draw(rows, args.png)


if __name__ == "__main__":
    main()
