"""Checks of the pipeline exercises (10.x): GPipe and 1F1B instruction lists, the bubble formula,
PipeDream's weight stashing.

Oracles that run no exercise region: minidl's tuned schedules
(``minidl.dist.pipeline.schedules``), whose lists a stage's list must equal, and
the pipeline simulator (``minidl.perf.pipeline_simulate``), which runs the
student's lists of all stages together and says whether they deadlock, how much
of the time is bubble and how many micro-batches each stage holds at once.
Every check runs several P and M, with M = 1, M < P and M not a multiple of P.
Weight stashing (10.4) runs on 2 MPI ranks against minidl's PipeDream executor.
"""

import numpy as np

from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl import random as md_random
from minidl.dist.pipeline import PipelineTrainer
from minidl.dist.pipeline import schedules as tuned
from minidl.dist.pipeline.trainer import build_stage, partition
from minidl.exercises import ExerciseFailure, exercise, expect_close, held
from minidl.exercises.checks.tuned import forbids
from minidl.perf import pipeline_simulate as tuned_simulate
from minidl.perf.pipeline_simulate import ideal_bubble, simulate
from minidl.reference.dist import pipeline as reference

PATH = "minidl/reference/dist/pipeline.py"
SCHEDULES = forbids(
    tuned.naive,
    tuned.gpipe,
    tuned.one_f_one_b,
    tuned.pipedream,
    tuned.interleaved,
    tuned.build,
    tuned._with_messages,
    name="minidl's tuned schedules (minidl.dist.pipeline.schedules)",
)
CASES = tuple((p, m) for p in (1, 2, 3, 4, 5) for m in (1, 2, 3, 5, 8))  # (P, M)
INTERLEAVED = tuple((p, v, m) for p in (2, 3, 4) for v in (2, 3) for m in (p, 2 * p))  # (P, V, M)


def _describe(programs, p, m):
    """What the simulator says about a whole schedule, in one line (it never raises)."""
    try:
        run = simulate(programs)
    except Exception as exc:  # noqa: BLE001 (the student's lists may be anything)
        return f"the simulator, running your lists of the {p}-stage pipeline: {exc}"
    return (
        f"the simulator runs your lists of the {p}-stage pipeline: "
        f"bubble {run.bubble_fraction:.4f} "
        f"(formula {ideal_bubble(p, m):.4f}), peak live micro-batches per stage "
        f"{list(run.peak_live)}"
    )


def _texts(instructions):
    return [str(i) for i in instructions]


def expect_same_lists(name, student, oracle, cases=CASES):
    """Each stage's list from ``student(s, P, M)`` must equal ``oracle(P, M)[s]``, for each
    (P, M) of ``cases``."""
    for p, m in cases:
        expected_programs = oracle(p, m)
        programs = [student(s, p, m) for s in range(p)]
        for s, (got, expected) in enumerate(zip(programs, expected_programs)):
            if got is None:
                raise ExerciseFailure(
                    f"{name}, P={p}, M={m}, stage {s}: the code returned None",
                    detail="a 'return' is missing",
                )
            got = list(got)
            if got == expected:
                held("equal", f"{name}, P={p}, M={m}, stage {s}", *map(_texts, (got, expected)))
                continue
            bad = next(
                (i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                min(len(got), len(expected)),
            )
            want = expected[bad] if bad < len(expected) else "(the end of the list)"
            have = got[bad] if bad < len(got) else "(the end of the list)"
            computes = [str(i) for i in expected if i.op in ("forward", "backward")]
            raise ExerciseFailure(
                f"{name}, P={p}, M={m}, stage {s}: instruction {bad} of {len(expected)} differs",
                want,
                have,
                where=f"stage {s} of {p}, after {[str(i) for i in got[max(0, bad - 3) : bad]]}",
                detail=f"expected forwards and backwards {' '.join(computes)}; "
                + _describe(programs, p, m),
            )


def expect_textbook_properties(name, build, peaks, cases=CASES):
    """Simulated: no deadlock, bubble (P-1)/(M+P-1), stage s's peak ``peaks(P, M, s)``."""
    for p, m in cases:
        run = simulate([build(s, p, m) for s in range(p)])
        expect_close(
            f"{name}, P={p}, M={m}: simulated bubble against (P-1)/(M+P-1)",
            run.bubble_fraction,
            ideal_bubble(p, m),
            rtol=0,
            atol=1e-12,
        )
        expected = tuple(peaks(p, m, s) for s in range(p))
        what = f"{name}, P={p}, M={m}: peak live micro-batches per stage"
        if run.peak_live != expected:
            raise ExerciseFailure(what, expected, run.peak_live)
        held("equal", what, run.peak_live, expected)


@exercise(
    "10.1",
    "GPipe: every forward, then every backward",
    path=PATH,
    hint="the order of one stage is F(0) ... F(M-1) then B(0) ... B(M-1), built with "
    "forward(m) and backward(m); with_messages adds the sends and receives",
)
@SCHEDULES
def check_gpipe(cases=CASES):
    expect_same_lists("GPipe", reference.gpipe, tuned.gpipe, cases)
    expect_textbook_properties("GPipe", reference.gpipe, lambda p, m, s: m, cases)


@exercise(
    "10.2",
    "1F1B: warm-up forwards, one forward one backward, cool-down backwards",
    path=PATH,
    hint="stage s first runs min(P-s-1, M) forwards alone; then each forward F(w+i) is "
    "followed by the backward B(i); the backwards left come last, in micro-batch order",
)
@SCHEDULES
def check_one_f_one_b(cases=CASES):
    expect_same_lists("1F1B", reference.one_f_one_b, tuned.one_f_one_b, cases)
    expect_textbook_properties("1F1B", reference.one_f_one_b, lambda p, m, s: min(p - s, m), cases)


@exercise(
    "10.3",
    "The pipeline bubble: idle share of a balanced pipeline",
    path=PATH,
    hint="count the time steps of the whole batch, (v M + P - 1), and the P - 1 of them "
    "each stage waits for the pipeline to fill and drain",
)
@forbids(tuned_simulate, name="minidl's tuned pipeline simulator")
def check_bubble_fraction(cases=CASES, interleaved=INTERLEAVED):
    """``reference.bubble_fraction`` against the simulated GPipe and 1F1B of each (P, M) of
    ``cases`` and the interleaved 1F1B of each (P, V, M) of ``interleaved``."""
    for p, m in cases:
        for schedule in ("gpipe", "1f1b"):
            run = simulate(tuned.build(schedule, p, m))
            expect_close(
                f"bubble of P={p} stages, M={m} micro-batches, against the simulated {schedule}",
                reference.bubble_fraction(p, m),
                run.bubble_fraction,
                rtol=0,
                atol=1e-12,
            )
    for p, v, m in interleaved:
        run = simulate(tuned.interleaved(p, m, v))
        expect_close(
            f"bubble of P={p} workers with v={v} chunks each, M={m} micro-batches, "
            "against the simulated interleaved 1F1B",
            reference.bubble_fraction(p, m, v),
            run.bubble_fraction,
            rtol=0,
            atol=1e-12,
        )


def _stashing_net(seed=11):
    md_random.manual_seed(seed)
    return L.Sequential(L.Linear(5, 8), L.Tanh(), L.Linear(8, 8), L.Tanh(), L.Linear(8, 4)).to(
        "float64"
    )


@exercise(
    "10.4",
    "PipeDream's weight stashing: each backward differentiates the weights its forward saw",
    path=PATH,
    ranks=2,
    hint="after a forward keep a copy of the stage's weights (the optimizer updates them in "
    "place); before the backward put that copy in place, recompute the forward from the kept "
    "input and backpropagate, then put the live weights back for the update",
)
def check_weight_stashing(comm, micro_batches_tried=(1, 3, 6), seed=2, net_seed=11, rows=12):
    """``reference.pipedream_window`` on 4 windows of ``rows`` rows against minidl's
    PipeDream executor on ``comm``'s ranks, for each number of micro-batches tried."""
    rng = np.random.default_rng(seed)
    windows = [(rng.standard_normal((rows, 5)), rng.integers(0, 4, rows)) for _ in range(4)]
    for micro_batches in micro_batches_tried:
        model = _stashing_net(net_seed)
        cut = partition(model, comm.size)
        stages = [build_stage(model, cut, s) for s in range(comm.size)]
        optimizers = [optim.SGD(stage.parameters(), lr=0.2) for stage in stages]
        trainer = PipelineTrainer(
            _stashing_net(net_seed),
            comm,
            optimizer=lambda ps: optim.SGD(ps, lr=0.2),
            schedule="pipedream",
            micro_batches=micro_batches,
        )
        for x, y in windows:
            xs, ys = np.array_split(x, micro_batches), np.array_split(y, micro_batches)
            reference.pipedream_window(stages, optimizers, xs, ys, F.cross_entropy)
            trainer.step(x, y)
        expected = trainer.full_state_dict()
        for name, value in model.state_dict().items():
            expect_close(
                f"PipeDream on {comm.size} stages, M={micro_batches}, 4 windows: {name} against "
                "minidl's executor",
                value,
                expected[name],
                rtol=1e-10,
                atol=1e-12,
            )
