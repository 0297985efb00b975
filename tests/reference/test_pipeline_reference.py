"""The textbook pipeline schedules (``minidl/reference/dist/pipeline.py``) against the tuned ones.

Every stage's list equals the tuned schedule's for P <= 8 and M <= 20; the simulator
proves the textbook properties of the reference lists themselves; the checks of
exercises 10.1-10.3 pass on the reference and name P, M, the stage and the first
differing instruction on typical wrong answers.
"""

import pytest

from minidl import exercises
from minidl.dist.pipeline import schedules as S
from minidl.exercises import ExerciseFailure
from minidl.perf.pipeline_simulate import DeadlockError, ideal_bubble, simulate
from minidl.reference.dist import pipeline as R

RANKS = range(1, 9)
MICRO_BATCHES = range(1, 21)


def programs(build, p, m):
    return [build(s, p, m) for s in range(p)]


@pytest.mark.parametrize(
    ("reference", "tuned"), ((R.gpipe, S.gpipe), (R.one_f_one_b, S.one_f_one_b))
)
def test_reference_lists_equal_the_tuned_ones(reference, tuned):
    for p in RANKS:
        for m in MICRO_BATCHES:
            assert programs(reference, p, m) == tuned(p, m), (reference.__name__, p, m)


def test_reference_lists_have_the_textbook_bubble_and_memory():
    for p in RANKS:
        for m in MICRO_BATCHES:
            for name, build in (("gpipe", R.gpipe), ("1f1b", R.one_f_one_b)):
                run = simulate(programs(build, p, m), backward_costs=[2.0] * p)
                assert run.bubble_fraction == pytest.approx(R.bubble_fraction(p, m), abs=1e-12)
                assert run.peak_live == tuple(R.peak_activations(name, s, p, m) for s in range(p))


def test_bubble_formula_equals_the_tuned_one_and_the_interleaved_simulation():
    for p in RANKS:
        for m in MICRO_BATCHES:
            for v in (1, 2, 3):
                assert R.bubble_fraction(p, m, v) == ideal_bubble(p, m, v)
        for v in (2, 3):
            run = simulate(S.interleaved(p, 2 * p, v))
            assert run.bubble_fraction == pytest.approx(R.bubble_fraction(p, 2 * p, v), abs=1e-12)


def test_with_messages_matches_the_executor_rules():
    assert [str(i) for i in R.gpipe(1, 3, 1)] == [
        "recv_act(0, c0)",
        "forward(0, c0)",
        "send_act(0, c0)",
        "recv_grad(0, c0)",
        "backward(0, c0)",
        "send_grad(0, c0)",
        "step",
    ]
    assert R.gpipe(0, 1, 1) == [
        S.Instruction("forward"),
        S.Instruction("backward"),
        S.Instruction("step"),
    ]
    with pytest.raises(ValueError, match="knows 'gpipe' and '1f1b'"):
        R.peak_activations("naive", 0, 2, 2)


@pytest.mark.parametrize("exercise_id", ("10.1", "10.2", "10.3"))
def test_checks_pass_on_the_reference(exercise_id):
    found = exercises.get(exercise_id)
    found.check()
    assert found.topic == "pipeline" and found.path == "minidl/reference/dist/pipeline.py"


def one_f_one_b_warming_up_too_long(stage, stages, micro_batches):
    """Wrong: P - s warm-up forwards instead of P - s - 1."""
    warmup = min(stages - stage, micro_batches)
    order = [R.forward(m) for m in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [R.forward(warmup + i), R.backward(i)]
    order += [R.backward(m) for m in range(micro_batches - warmup, micro_batches)]
    return R.with_messages(stage, stages, order)


def gpipe_backwards_last_first(stage, stages, micro_batches):
    """Wrong: the backwards in reverse micro-batch order."""
    order = [R.forward(m) for m in range(micro_batches)]
    order += [R.backward(m) for m in reversed(range(micro_batches))]
    return R.with_messages(stage, stages, order)


def one_f_one_b_warming_up_backwards(stage, stages, micro_batches):
    """Wrong: min(s, M) warm-up forwards: the last stage waits for a micro-batch that stage 0
    sends only after the gradient the last stage has not sent yet."""
    warmup = min(stage, micro_batches)
    order = [R.forward(m) for m in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [R.forward(warmup + i), R.backward(i)]
    order += [R.backward(m) for m in range(micro_batches - warmup, micro_batches)]
    return R.with_messages(stage, stages, order)


def test_a_wrong_1f1b_names_p_m_the_stage_and_the_first_differing_instruction(monkeypatch):
    monkeypatch.setattr(R, "one_f_one_b", one_f_one_b_warming_up_too_long)
    with pytest.raises(ExerciseFailure) as failure:
        exercises.get("10.2").check()
    text = str(failure.value)
    assert failure.value.what.startswith("1F1B, P=1, M=2, stage 0: instruction 1 of 5 differs")
    assert failure.value.expected == S.Instruction("backward", 0)
    assert failure.value.got == S.Instruction("forward", 1)
    assert "peak live micro-batches per stage [2]" in text


def test_a_deadlocking_1f1b_is_reported_by_the_simulator(monkeypatch):
    monkeypatch.setattr(R, "one_f_one_b", one_f_one_b_warming_up_backwards)
    with pytest.raises(DeadlockError):
        simulate(programs(R.one_f_one_b, 2, 2))
    with pytest.raises(ExerciseFailure) as failure:
        exercises.get("10.2").check()
    assert failure.value.what.startswith("1F1B, P=2, M=2, stage 0:"), failure.value.what
    assert "deadlocks" in str(failure.value), str(failure.value)


def test_reversed_gpipe_backwards_and_a_wrong_bubble_fail(monkeypatch):
    monkeypatch.setattr(R, "gpipe", gpipe_backwards_last_first)
    with pytest.raises(ExerciseFailure, match=r"GPipe, P=1, M=2, stage 0: instruction 2"):
        exercises.get("10.1").check()
    monkeypatch.setattr(R, "bubble_fraction", lambda p, m, v=1: (p - 1) / (v * m + p))
    with pytest.raises(ExerciseFailure, match=r"P=2 stages, M=1 micro-batches"):
        exercises.get("10.3").check()
    monkeypatch.setattr(R, "bubble_fraction", lambda p, m, v=1: (p - 1) / (m + p - 1))
    with pytest.raises(ExerciseFailure, match=r"v=2 chunks"):
        exercises.get("10.3").check()
