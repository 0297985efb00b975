"""Every schedule, every P <= 8 and M <= 32, simulated without MPI: no deadlock, forward
before backward, the textbook bubble and the textbook peak of live activations."""

import pytest

from minidl.dist.pipeline import schedules as S
from minidl.perf.pipeline_simulate import (
    DeadlockError,
    ScheduleError,
    check_structure,
    ideal_bubble,
    simulate,
    timeline_text,
)
from minidl.perf.pipeline_timeline import bubble, simulation_trace, time_shares

RANKS = range(1, 9)
MICRO_BATCHES = range(1, 33)


def all_ops_in_order(programs):
    return [[(i.op, i.micro_batch, i.chunk) for i in p] for p in programs]


def program(words):
    """A rank's instructions from ``op:micro_batch`` words."""
    return [S.Instruction(op, int(m)) for op, m in (word.split(":") for word in words.split())]


@pytest.mark.parametrize("schedule", ("gpipe", "1f1b"))
def test_gpipe_and_1f1b_reach_the_bubble_formula(schedule):
    for p in RANKS:
        for m in MICRO_BATCHES:
            programs = S.build(schedule, p, m)
            for backward in (1.0, 2.0):  # the formula holds for any equal-stage costs
                run = simulate(programs, backward_costs=[backward] * p)
                assert run.bubble_fraction == pytest.approx(ideal_bubble(p, m), abs=1e-12)
                assert run.makespan == pytest.approx((m + p - 1) * (1 + backward))


def test_gpipe_holds_every_micro_batch_and_1f1b_at_most_p_minus_s():
    for p in RANKS:
        for m in MICRO_BATCHES:
            assert simulate(S.gpipe(p, m)).peak_live == (m,) * p
            peaks = simulate(S.one_f_one_b(p, m)).peak_live
            assert peaks == tuple(min(p - s, m) for s in range(p)), (p, m, peaks)


def test_naive_runs_one_micro_batch_at_a_time():
    for p in RANKS:
        for m in MICRO_BATCHES:
            run = simulate(S.naive(p, m))
            assert run.peak_live == (1,) * p
            assert run.bubble_fraction == pytest.approx((p - 1) / p, abs=1e-12)
    assert all_ops_in_order(S.naive(3, 1)) == all_ops_in_order(S.gpipe(3, 1))


@pytest.mark.parametrize("chunks", (1, 2, 3, 4))
def test_interleaved_reaches_its_bubble_formula(chunks):
    for p in RANKS:
        for m in range(p, 33, p):
            run = simulate(S.interleaved(p, m, chunks))
            assert run.bubble_fraction == pytest.approx(ideal_bubble(p, m, chunks), abs=1e-12)
            assert run.bubble_fraction <= ideal_bubble(p, m) + 1e-12
            # rank r warms up with 2(P-r-1) + (v-1)P forwards, one more in flight
            expected = [min(2 * (p - r - 1) + (chunks - 1) * p + 1, chunks * m) for r in range(p)]
            assert run.peak_live == tuple(expected)


def test_synchronous_schedules_update_once_from_the_weights_every_forward_saw():
    for schedule in ("naive", "gpipe", "1f1b"):
        for p in RANKS:
            for m in (1, 5, 32):
                run = simulate(S.build(schedule, p, m))
                assert all(set(stale) == {0} for stale in run.staleness)
                assert run.peak_stashed == (0,) * p


def stashed_versions(p, s, m):
    """Most older weight versions stage s holds after a step: after step j (which follows
    backward j-1) micro-batches j..min(w+j, M)-1 are in flight, w = P-s-1 the warm-up, and
    micro-batch i's forward saw version max(0, i-w)."""
    w = p - s - 1
    return max(len({max(0, i - w) for i in range(j, min(w + j, m))}) for j in range(1, m + 1))


def test_pipedream_is_min_m_p_minus_s_minus_1_stale_and_stashes_that_many_versions():
    """PipeDream (weight stashing): on stage s micro-batch m's gradient is applied after
    min(m, P-s-1) other updates, its bubble is 1F1B's, and at most P-s-1 older weight
    versions are kept besides the live one (exactly that many once M >= 2(P-s-1))."""
    for p in RANKS:
        for m in MICRO_BATCHES:
            programs = S.pipedream(p, m)
            assert all(sum(i.op == "step" for i in program) == m for program in programs)
            run = simulate(programs)
            for s in range(p):
                assert run.staleness[s] == tuple(min(i, p - s - 1) for i in range(m)), (p, m, s)
                assert run.peak_stashed[s] == stashed_versions(p, s, m), (p, m, s)
                assert run.peak_stashed[s] <= p - s - 1
                if m >= 2 * (p - s - 1):
                    assert run.peak_stashed[s] == p - s - 1
            assert run.bubble_fraction == pytest.approx(ideal_bubble(p, m), abs=1e-12)
            assert run.peak_live == simulate(S.one_f_one_b(p, m)).peak_live


def test_unequal_stage_costs_follow_the_slowest_stage():
    run = simulate(S.one_f_one_b(4, 8), forward_costs=[1, 1, 3, 1], backward_costs=[2, 2, 6, 2])
    assert run.makespan >= 8 * (3 + 6)
    assert run.bubble_fraction > ideal_bubble(4, 8)


def test_timeline_is_per_rank_and_never_overlaps():
    run = simulate(S.one_f_one_b(4, 6))
    for rank, events in enumerate(run.timeline):
        assert len(events) == 2 * 6
        assert all(e.rank == rank for e in events)
        assert all(a.end <= b.start for a, b in zip(events, events[1:]))
    assert max(e.end for events in run.timeline for e in events) == run.makespan


def test_a_schedule_that_waits_in_a_circle_is_named_a_deadlock():
    programs = S.gpipe(2, 2)
    # stage 1 asks for micro-batch 1 before 0 while stage 0 waits for a gradient first
    programs[0] = program(
        "forward:0 send_act:0 recv_grad:0 backward:0 "
        "forward:1 send_act:1 recv_grad:1 backward:1 step:0"
    )
    programs[1] = program(
        "recv_act:1 forward:1 recv_act:0 forward:0 "
        "backward:0 send_grad:0 backward:1 send_grad:1 step:0"
    )
    with pytest.raises(DeadlockError, match="rank 0 at recv_grad.*rank 1 at recv_act"):
        simulate(programs)


def test_broken_schedules_are_named():
    programs = S.gpipe(2, 2)
    with pytest.raises(ScheduleError, match="must end with a step"):
        check_structure([programs[0][:-1], programs[1]])
    stepping = S.pipedream(2, 2)
    early = [i for i in stepping[1] if i != S.Instruction("step", 0)]
    early.insert(0, S.Instruction("step", 0))
    with pytest.raises(ScheduleError, match="does not follow its backward"):
        check_structure([stepping[0], early])
    with pytest.raises(ScheduleError, match="3 steps; give one at the end, or one after each"):
        check_structure([stepping[0], [*stepping[1], S.Instruction("step", 1)]])
    swapped = list(programs[0])
    f, b = swapped.index(S.Instruction("backward", 0)), swapped.index(S.Instruction("backward", 1))
    swapped[f], swapped[b] = swapped[b], swapped[f]
    with pytest.raises(ScheduleError, match=r"backwards run micro-batches \[1, 0\]"):
        check_structure([swapped, programs[1]])
    with pytest.raises(ScheduleError, match="unmatched messages"):
        check_structure([programs[0], [S.Instruction("send_act", 0), *programs[1]]])


def test_instructions_are_small_frozen_values():
    ins = S.Instruction("forward", 3, 1)
    assert str(ins) == "forward(3, c1)" and ins == S.Instruction("forward", 3, 1)
    with pytest.raises(AttributeError):
        ins.op = "backward"
    with pytest.raises(ValueError, match="choose one of forward, backward"):
        S.Instruction("fwd")


def test_bad_counts_are_refused_with_what_fits():
    with pytest.raises(ValueError, match="micro_batches >= 1"):
        S.gpipe(2, 0)
    with pytest.raises(ValueError, match="ranks >= 1"):
        S.one_f_one_b(0, 4)
    with pytest.raises(ValueError, match=r"not a multiple of 4 \(try 4, 8, 12\)"):
        S.interleaved(4, 6, 2)
    with pytest.raises(ValueError, match="choose one of naive, gpipe, 1f1b, interleaved, pipe"):
        S.build("zigzag", 2, 2)
    with pytest.raises(ValueError, match="use chunks=1, or the interleaved schedule"):
        S.build("1f1b", 2, 2, chunks=2)


def test_the_timeline_reads_as_text():
    text = timeline_text(simulate(S.gpipe(2, 2)))
    assert text.splitlines() == [
        "rank 0 | F0  F1  .   .   B0  B1  ",
        "rank 1 | .   F0  F1  B0  B1  .   ",
    ]
    assert "F0'" in timeline_text(simulate(S.interleaved(2, 2, 2)))
    with pytest.raises(ValueError, match="whole-number"):
        timeline_text(simulate(S.gpipe(2, 2), forward_costs=[0.5, 1]))


@pytest.mark.parametrize("schedule, chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_the_bubble_read_off_a_simulated_trace_is_the_simulators(schedule, chunks):
    costs = [1.0, 1.5, 1.0, 2.0] * chunks
    run = simulate(S.build(schedule, 4, 8, chunks), costs, [2 * c for c in costs])
    trace = simulation_trace(run, unit_seconds=1e-3)
    assert bubble(trace) == pytest.approx(run.bubble_fraction, abs=1e-12)
    computes = [e for e in trace["traceEvents"] if e.get("cat") in ("forward", "backward")]
    assert len(computes) == 4 * 2 * 8 * chunks
    assert {e["pid"] for e in computes} == {0, 1, 2, 3}


def test_the_shares_of_the_ranks_time_add_up_to_one_and_name_the_waits():
    """Two ranks over one batch of span 10: rank 0 computes 4, sends 1; rank 1 waits 5 for
    its message, then computes 4: compute 8/20, send 1/20, waiting 5/20, idle the rest."""

    def event(rank, cat, ts, dur):
        return {"ph": "X", "pid": rank, "cat": cat, "ts": ts, "dur": dur, "args": {"step": 1}}

    trace = {
        "traceEvents": [
            event(0, "forward", 0, 4),
            event(0, "send", 4, 1),
            event(1, "recv", 0, 5),
            event(1, "forward", 5, 4),
            event(1, "update", 9, 1),
        ]
    }
    shares = time_shares(trace)
    assert shares == pytest.approx(
        {"forward": 0.4, "backward": 0.0, "send": 0.05, "recv": 0.25, "update": 0.05, "idle": 0.25}
    )
    assert sum(shares.values()) == pytest.approx(1.0)
    assert bubble(trace) == pytest.approx(0.6)
