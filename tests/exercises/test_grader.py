"""The grader's verdicts on fake checks whose outcome is known: in process and on MPI ranks."""

import json

import pytest

from minidl.exercises import grader
from minidl_app.launch import mpi_unavailable_reason


def grade_one(exercise):
    (result,) = grader.grade([exercise])
    return result


def test_a_passing_check_passes(fake_exercises):
    result = grade_one(fake_exercises["90.1"])
    assert result.status == "passed" and result.ok
    assert result.message == "" and result.hint == ""


def test_a_failure_shows_what_expected_got_where_and_the_hint(fake_exercises):
    result = grade_one(fake_exercises["90.2"])
    assert result.status == "failed" and not result.ok
    assert "partial sums: 1 of 3 elements differ" in result.message
    assert "index (2,)" in result.message
    assert "expected: 6.0" in result.message and "got:      7.0" in result.message
    assert result.hint == "look at the last element"
    text = grader.format_result(result)
    assert "FAILED" in text and "hint: look at the last element" in text


def test_an_unimplemented_region_is_not_implemented_yet(fake_exercises):
    result = grade_one(fake_exercises["90.3"])
    assert result.status == "unimplemented"
    assert "exercise 90.3 (a stubbed region) is not implemented yet" in result.message
    assert "minidl exercise check 90.3" in result.message
    assert "not implemented yet" in grader.format_result(result)


def test_an_exception_names_its_type_message_and_the_line_in_the_students_file(fake_exercises):
    result = grade_one(fake_exercises["90.4"])
    assert result.status == "error"
    assert result.message.startswith("ZeroDivisionError: float division by zero")
    assert "tests/exercises/fake_student.py, line" in result.message
    assert "in divide: return a / b" in result.message
    assert result.hint == "mind the divisor"


def test_a_bare_assert_shows_its_line_not_an_empty_message(fake_exercises):
    result = grade_one(fake_exercises["90.5"])
    assert result.status == "error"
    assert "AssertionError: assert failed: assert x > 0" in result.message
    assert "in assert_positive" in result.message


def test_a_check_that_never_ends_times_out_and_is_stopped(fake_exercises):
    exercise = fake_exercises["90.6"]
    result = grade_one(exercise)
    assert result.status == "timed_out"
    assert "no answer after 0.5 s" in result.message
    assert exercise.timeout <= result.seconds < exercise.timeout + 5
    # the loop was interrupted: the next check is not slowed by a spinning thread
    assert grade_one(fake_exercises["90.1"]).status == "passed"


def test_a_check_that_runs_another_exercises_stub_is_an_error(fake_exercises):
    result = grade_one(fake_exercises["90.7"])
    assert result.status == "error"
    assert "ran the region of exercise 90.3" in result.message


def test_json_report_has_every_result_and_the_counts(fake_exercises):
    results = grader.grade([fake_exercises[i] for i in ("90.1", "90.2", "90.3")])
    document = json.loads(json.dumps(grader.report_json(results)))
    assert [r["id"] for r in document["results"]] == ["90.1", "90.2", "90.3"]
    assert [r["status"] for r in document["results"]] == ["passed", "failed", "unimplemented"]
    assert document["summary"]["passed"] == 1 and document["summary"]["failed"] == 1
    assert document["summary"]["unimplemented"] == 1 and document["summary"]["error"] == 0


def test_mpi_checks_are_skipped_with_how_to_install_when_mpi_is_missing(
    fake_exercises, monkeypatch
):
    monkeypatch.setattr("minidl_app.launch.mpi_unavailable_reason", lambda: "mpi4py is missing")
    result = grade_one(fake_exercises["91.1"])
    assert result.status == "skipped" and result.ok
    assert "mpi4py is missing" in result.message and "pip install" in result.message


@pytest.mark.mpi
def test_mpi_checks_report_per_rank_and_a_hang_does_not_stop_the_others(fake_exercises):
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    results = {r.id: r for r in grader.grade([fake_exercises[f"91.{i}"] for i in range(1, 7)])}
    assert results["91.1"].status == "passed"
    assert [r.status for r in results["91.1"].ranks] == ["passed", "passed"]
    failed = results["91.2"]
    assert failed.status == "failed"
    assert [r.status for r in failed.ranks] == ["passed", "failed"]
    assert failed.message.startswith("rank 1: the rank: not equal")
    assert "expected: 0" in failed.message and "got:      1" in failed.message
    hung = results["91.3"]
    assert hung.status == "timed_out"
    assert hung.ranks[0].status == "timed_out"
    assert hung.message.startswith(f"timed out after 3 s: {grader.MPI_HANG}")
    assert results["91.4"].status == "passed"  # ran in a new job after the hang
    aborted = results["91.5"]  # the check printed its traceback and aborted every rank
    assert aborted.status == "error"
    assert aborted.message.startswith(
        "rank 1: ZeroDivisionError: float division by zero\n"
        "  in tests/exercises/fake_student.py, line"
    )
    assert "in divide: return a / b" in aborted.message
    raised = results["91.6"]  # the runner ended the job for the rank left waiting
    assert raised.status == "error"
    assert raised.message.startswith("rank 0: ZeroDivisionError")
    assert grader.MPI_HANG in raised.message


def test_reports_cut_into_by_another_rank_are_still_found():
    one = grader.REPORT + json.dumps(
        {"id": "9.1", "rank": 0, "status": "passed", "message": "", "seconds": 0.1}
    )
    two = grader.REPORT + json.dumps(
        {"id": "9.1", "rank": 1, "status": "failed", "message": "x\ny", "seconds": 0.2}
    )
    reports, hung = grader.parse_reports(
        f"noise\n{one}{two}\n{two.replace('failed', 'timed_out')}\n"
    )
    assert hung == {"9.1"}
    assert reports["9.1"][0].status == "passed"
    assert reports["9.1"][1].status == "failed"  # the first report of a rank wins
    assert reports["9.1"][1].message == "x\ny"


def test_one_rank_that_raises_while_the_other_hangs_is_reported_as_the_error(fake_exercises):
    exercise = fake_exercises["91.3"]
    per_rank = {
        0: grader.RankResult(0, "error", "IndexError: 5\n  in f", 0.1),
        1: grader.RankResult(1, "timed_out", "still waiting", 3.0),
    }
    result = grader.combine_ranks(exercise, per_rank, 3, False, "")
    assert result.status == "error"
    assert result.message.startswith("rank 0: IndexError: 5")
    assert "(rank 0 ERROR, rank 1 TIMED OUT, rank 2 no report)" in result.message
    assert result.seconds == 3.0


def test_a_job_that_died_without_reports_shows_its_last_output(fake_exercises):
    output = "Traceback (most recent call last):\nImportError: cannot import name 'x'\n"
    result = grader.combine_ranks(fake_exercises["91.1"], {}, 2, False, output)
    assert result.status == "error"
    assert result.message.startswith("the MPI job ended early; its last output:")
    assert "ImportError: cannot import name 'x'" in result.message
    assert "(no rank reported: the job ended first)" in result.message


TRACEBACK = """rank 1 of 2 failed:
Traceback (most recent call last):
  File "/x/minidl/exercises/checks/fake.py", line 73, in _or_abort
    return role()
           ^^^^^^
  File "{student}", line 89, in work
    {code}
{error}
Abort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort
"""


@pytest.mark.parametrize(
    "code, error, status, message",
    [
        (
            'raise Unimplemented("91.1", "t")',
            "minidl.exercises.Unimplemented: exercise 91.1 (t) is not",
            "unimplemented",
            "exercise 91.1 (t) is not",
        ),
        (
            "expect_close(...)",
            (
                "minidl.exercises.ExerciseFailure: sums: 1 of 3 elements differ\n"
                "  expected: 1.0\n  got:      2.0"
            ),
            "failed",
            "sums: 1 of 3 elements differ\n  expected: 1.0\n  got:      2.0",
        ),
        (
            "x = y[5]",
            "IndexError: index 5 is out of bounds",
            "error",
            (
                "IndexError: index 5 is out of bounds\n"
                "  in tests/exercises/fake_student.py, line 89, in work: x = y[5]"
            ),
        ),
    ],
)
def test_the_traceback_of_a_rank_that_aborted_gives_the_verdict(
    fake_exercises, code, error, status, message
):
    from minidl.exercises import repository_root

    student = f"{repository_root()}/tests/exercises/fake_student.py"
    output = TRACEBACK.format(student=student, code=code, error=error)
    assert grader.crash_outcome(fake_exercises["91.1"], output) == (status, message)


def test_ranks_are_said_to_agree_only_when_their_values_do(fake_exercises):
    exercise = fake_exercises["91.2"]
    message = "rank 1 of 3: sums: 1 of 3 elements differ"
    shared = {r: grader.RankResult(r, "failed", message, 0.1) for r in range(3)}
    result = grader.combine_ranks(exercise, shared, 3, False, "")
    assert "the same on all 3 ranks" not in result.message  # one rank's failure, shared
    assert "(all 3 ranks reported this; the values they compared differ" in result.message
    differ = {r: grader.RankResult(r, "failed", message, 0.1, f"digest{r}") for r in range(3)}
    assert "the same on all" not in grader.combine_ranks(exercise, differ, 3, False, "").message
    same = {r: grader.RankResult(r, "failed", message, 0.1, "digest") for r in range(3)}
    result = grader.combine_ranks(exercise, same, 3, False, "")
    assert result.message.endswith("(the same on all 3 ranks)")


def test_a_failure_carries_a_digest_of_the_values_it_compared():
    import numpy as np

    from minidl.exercises import ExerciseFailure, expect_close

    digests = []
    for got in (np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.5, 4.0]), np.array([1.0, 2.5, 4.0])):
        with pytest.raises(ExerciseFailure) as failure:
            expect_close("sums", got, np.array([1.0, 2.0, 3.0]))
        digests.append(failure.value.values)
    assert digests[0] != digests[1] == digests[2] != ""
