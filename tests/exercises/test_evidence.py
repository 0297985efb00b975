"""A pass needs its evidence: the grader judges what the code gave to each comparison again,
against the reference run, and a pass it does not bear out is a failure saying why."""

import json

import numpy as np
import pytest

from minidl import exercises
from minidl.exercises import expect_close, expect_equal, expect_true
from minidl_course.evidence import encode, judged, plain, problem
from minidl_course.grader import Result, grade


def noted(compare):
    """The JSON evidence of the comparisons ``compare()`` makes, through a JSON round trip."""
    exercises.EVIDENCE = []
    try:
        compare()
        return json.loads(json.dumps(encode(exercises.EVIDENCE)))
    finally:
        exercises.EVIDENCE = None


def reference():
    expect_close("sums", np.array([1.0, 3.0, 6.0], np.float32), np.array([1.0, 3.0, 6.0]))
    expect_equal("count", 3, 3)
    expect_true("no library collective", True)


def passed(evidence):
    return Result("9.9", "t", "p", "passed", evidence=evidence)


def test_nothing_is_noted_outside_grading():
    assert exercises.EVIDENCE is None
    reference()
    assert exercises.EVIDENCE is None


def test_the_same_comparisons_with_the_right_values_bear_out_a_pass():
    theirs = [noted(reference)]
    assert [item["kind"] for item in theirs[0]] == ["close", "equal", "true"]
    assert problem([noted(reference)], theirs) is None
    result = judged(passed([noted(reference)]), theirs)
    assert result.status == "passed" and result.evidence is None


def test_a_claimed_pass_without_its_comparisons_is_a_failure():
    result = judged(passed(None), [noted(reference)])
    assert result.status == "failed"
    assert "sent no record of its comparisons" in result.message


def test_values_off_the_reference_are_found_whatever_the_code_claimed_to_compare():
    theirs = [noted(reference)]

    def forged():  # the code's own "expected" agrees with its wrong answer
        expect_close("sums", np.zeros(3), np.zeros(3))
        expect_equal("count", 3, 3)
        expect_true("no library collective", True)

    found = problem([noted(forged)], theirs)
    assert found.startswith("sums: 3 of 3 elements differ") and "expected: 6.0" in found

    def miscounted():
        expect_close("sums", np.array([1.0, 3.0, 6.0]), np.array([1.0, 3.0, 6.0]))
        expect_equal("count", 4, 4)
        expect_true("no library collective", True)

    assert "count: not equal" in problem([noted(miscounted)], theirs)


def test_fewer_or_other_comparisons_are_found():
    theirs = [noted(reference)]
    assert "made 1 comparisons where the check makes 3" in problem(
        [noted(lambda: expect_true("no library collective", True))], theirs
    )

    def other():
        expect_close("sums", np.array([1.0, 3.0, 6.0]), np.array([1.0, 3.0, 6.0]))
        expect_true("count", True)
        expect_true("no library collective", True)

    assert "a comparison other than the check's" in problem([noted(other)], theirs)
    assert "for every rank" in problem([noted(reference)] * 2, theirs)
    assert "unreadable record" in problem(
        [[{"kind": "close", "what": "sums"}] + theirs[0][1:]], theirs
    )


def test_an_expected_value_computed_from_the_code_is_accepted_within_the_tolerance():
    """A check whose expected value comes from the code's own output (a numerical gradient of
    its forward, say) differs a little from the reference's: right code still passes."""
    theirs = [noted(lambda: expect_close("g", np.array([1.0]), np.array([1.0]), rtol=1e-3))]
    near = noted(lambda: expect_close("g", np.array([1.0015]), np.array([1.0009]), rtol=1e-3))
    assert problem([near], theirs) is None
    far = noted(lambda: expect_close("g", np.array([1.01]), np.array([1.01]), rtol=1e-3))
    assert "1 of 1 elements differ" in problem([far], theirs)


def test_the_reference_tolerance_counts_not_the_one_the_code_sent():
    theirs = [noted(lambda: expect_close("g", np.array([1.0]), np.array([1.0])))]
    loose = noted(lambda: expect_close("g", np.array([2.0]), np.array([1.0]), rtol=1.0))
    assert "1 of 1 elements differ" in problem([loose], theirs)


def test_a_pass_the_reference_run_did_not_give_is_kept_and_says_so():
    result = judged(passed([noted(reference)]), None)
    assert result.status == "passed" and "not judged again" in result.message
    failed = judged(Result("9.9", "t", "p", "failed", "wrong", evidence=None), [[]])
    assert failed.status == "failed" and failed.message == "wrong"


def test_plain_values_keep_equality_across_json():
    for value in [np.int64(3), (1, 2), {"a": (1, np.float32(0.5))}, None, "x", [True]]:
        assert json.loads(json.dumps(plain(value))) == plain(value)
    assert plain(np.int64(3)) == plain(3) and plain((1, 2)) == plain([1, 2])


def test_grading_notes_each_pass_s_comparisons(fake_exercises):
    passes, fails = fake_exercises["90.1"], fake_exercises["90.2"]
    with_evidence = grade([passes, fails], evidence=True)
    assert [item["what"] for item in with_evidence[0].evidence[0]] == ["three ones"]
    assert with_evidence[1].status == "failed" and with_evidence[1].evidence is None
    assert "evidence" not in with_evidence[0].to_json() or with_evidence[0].evidence
    plain_run = grade([passes])
    assert plain_run[0].evidence is None and "evidence" not in plain_run[0].to_json()


@pytest.mark.mpi
def test_mpi_passes_carry_the_comparisons_of_every_rank(fake_exercises):
    from minidl_app.launch import mpi_unavailable_reason

    if mpi_unavailable_reason():
        pytest.skip("needs mpi4py and mpiexec")
    (result,) = grade([fake_exercises["91.1"]], evidence=True)
    assert result.status == "passed"
    assert len(result.evidence) == 2 and all(isinstance(r, list) for r in result.evidence)
    assert all(rank.evidence is None for rank in result.ranks)


def test_a_large_array_is_judged_on_evenly_spaced_elements():
    right = np.arange(5000.0)
    theirs = [noted(lambda: expect_close("big", right, right))]
    assert len(theirs[0][0]["got"]["data"]) == 4 * (8 * 512 + 2) // 3  # base64 of 512 doubles
    wrong_everywhere = noted(lambda: expect_close("big", right + 1, right + 1))
    assert "(of 512 of its 5000 elements, evenly spaced)" in problem([wrong_everywhere], theirs)
    reshaped = noted(lambda: expect_close("big", right.reshape(50, 100), right.reshape(50, 100)))
    assert "shape (50, 100) where the reference run has (5000,)" in problem([reshaped], theirs)


def test_a_comparison_whose_expected_value_is_the_code_s_own_is_judged_by_itself():
    """Two calls with the same seed must agree; the reference solution draws other codes."""
    theirs = [noted(lambda: expect_close("again", np.ones(4), np.ones(4), from_code=True))]
    other_draws = noted(lambda: expect_close("again", np.zeros(4), np.zeros(4), from_code=True))
    assert problem([other_draws], theirs) is None
    mine = other_draws[0]
    mine["got"] = noted(lambda: expect_close("x", np.arange(4.0), np.arange(4.0)))[0]["got"]
    assert "3 of 4 elements differ" in problem([other_draws], theirs)
    plain_reference = [noted(lambda: expect_close("again", np.ones(4), np.ones(4)))]
    claimed = noted(lambda: expect_close("again", np.zeros(4), np.zeros(4), from_code=True))
    assert "4 of 4 elements differ" in problem([claimed], plain_reference)
    assert (
        problem(
            [noted(lambda: expect_equal("n", 2, 2, from_code=True))],
            [noted(lambda: expect_equal("n", 5, 5, from_code=True))],
        )
        is None
    )
