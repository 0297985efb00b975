"""``minidl exercise grade``: only the students' regions count, hostile code cannot fake a grade,
and the exports follow Gradescope's results.json and a CSV per assignment."""

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from minidl.exercises import repository_root
from minidl_app.cli import main
from minidl_course.student import write_student_tree
from minidl_course.submission import region_bodies

ROOT = repository_root()
COURSE = {"assignments": {"week-01": {"1.1": 4, "2.2": 6}, "week-02": {"4.3": 5, "8.1": 2}}}
LOSS = "minidl/reference/functional/loss.py"
AUTOGRAD = "minidl/reference/autograd.py"
ADAM = "minidl/reference/optim/adam.py"
SSP = "minidl/reference/dist/ssp.py"
LINEAR = "minidl/reference/functional/linear.py"
GRADESCOPE_TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "visibility"}


def set_region(tree, path, exercise_id, body, k=0):
    """Replace the lines of the k-th region of ``exercise_id`` in ``tree/path`` with ``body``
    (its lines written at the markers' indentation)."""
    full = os.path.join(tree, path)
    with open(full) as source:
        lines = source.read().splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if f"BEGIN EXERCISE {exercise_id}" in line]
    begin = begins[k]
    end = next(i for i in range(begin, len(lines)) if f"END EXERCISE {exercise_id}" in lines[i])
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    lines[begin + 1 : end] = [indent + line + "\n" for line in body.splitlines()]
    with open(full, "w") as out:
        out.write("".join(lines))


def solution(path, exercise_id, k=0):
    """The instructor's lines of the k-th region of ``exercise_id``, dedented."""
    indent, lines = region_bodies(ROOT)[0][(path, exercise_id, k)]
    return "".join(line[len(indent) :] for line in lines)


def solve(tree, path, exercise_id, regions=1):
    """Put the instructor's solution into every region of ``exercise_id``."""
    for k in range(regions):
        set_region(tree, path, exercise_id, solution(path, exercise_id, k), k)


def tamper_with_the_checks(tree):
    """The three ``return`` lines that make every comparison of the tree's own checks pass."""
    path = os.path.join(tree, "minidl", "exercises", "__init__.py")
    with open(path) as source:
        text = source.read()
    for name in ("expect_close", "expect_equal", "expect_true"):
        text = re.sub(
            rf'(def {name}\(.*?\):\n    """.*?"""\n)', r"\1    return\n", text, flags=re.S
        )
    with open(path, "w") as out:
        out.write(text)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Submissions of four students graded once: ``(out folder, {student: results.json})``."""
    base = tmp_path_factory.mktemp("grading")
    subs = base / "subs"
    for name in ("alice", "bob", "carol", "dave"):
        write_student_tree(subs / name, only=["1.1", "2.2", "4.3", "8.1"])
    alice = str(subs / "alice")  # right 1.1, wrong 2.2 and 8.1, and her checks tampered with
    solve(alice, AUTOGRAD, "1.1", regions=2)
    set_region(alice, LOSS, "2.2", "return p * 0")
    set_region(alice, SSP, "8.1", "return False")
    tamper_with_the_checks(alice)
    bob = str(subs / "bob")  # prints in 1.1, ends the interpreter in 2.2 with os._exit(0)
    solve(bob, AUTOGRAD, "1.1", regions=2)
    set_region(bob, AUTOGRAD, "1.1", 'print("bob debugging 1.1")\n' + solution(AUTOGRAD, "1.1"))
    set_region(bob, LOSS, "2.2", "import os\nos._exit(0)")
    solve(bob, ADAM, "4.3")
    carol = str(subs / "carol")  # kills the interpreter, changes the cache, breaks the syntax
    kill = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    set_region(carol, AUTOGRAD, "1.1", kill, k=1)
    set_region(carol, LOSS, "2.2", "p -= 1\nreturn p")
    set_region(carol, ADAM, "4.3", "return w -")
    dave = str(subs / "dave")  # everything right
    solve(dave, AUTOGRAD, "1.1", regions=2)
    solve(dave, LOSS, "2.2")
    solve(dave, ADAM, "4.3")
    solve(dave, SSP, "8.1")
    course = base / "course.json"
    course.write_text(json.dumps(COURSE))
    out = base / "grades"
    status = main(["exercise", "grade", str(subs), "--out", str(out), "--course", str(course)])
    assert status == 0
    documents = {n: json.loads((out / n / "results.json").read_text()) for n in os.listdir(subs)}
    return out, subs, documents


def checks_named(document, exercise_id, hidden=False):
    return [
        t
        for t in document["tests"]
        if t["number"] == exercise_id and hidden == ("hidden" in t["name"])
    ]


def test_the_tampered_checks_fool_the_students_own_tree_but_not_the_grade(graded):
    _, subs, documents = graded
    own = subprocess.run(
        [sys.executable, "-m", "minidl", "exercise", "check", "2.2", "8.1", "--json"],
        cwd=subs / "alice",
        env=dict(os.environ, PYTHONPATH=str(subs / "alice")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    own_verdicts = [r["status"] for r in json.loads(own.stdout)["results"]]
    assert own_verdicts == ["passed", "passed"]  # the tampering works in the student's tree
    alice = documents["alice"]
    (visible,) = checks_named(alice, "2.2")
    assert visible["score"] == 0 and visible["status"] == "failed"
    assert "elements differ" in visible["output"]
    (gate,) = checks_named(alice, "8.1")
    assert gate["score"] == 0 and gate["status"] == "failed"
    assert all(t["score"] == t["max_score"] > 0 for t in checks_named(alice, "1.1"))
    assert alice["score"] == pytest.approx(4.0)


def test_output_of_a_solution_is_kept_with_its_check_and_os_exit_is_an_error(graded):
    bob = graded[2]["bob"]
    (first,) = checks_named(bob, "1.1")
    assert first["score"] == 4 and "bob debugging 1.1" in first["output"]
    for test in checks_named(bob, "2.2") + checks_named(bob, "2.2", hidden=True):
        assert test["score"] == 0 and "os._exit(0)" in test["output"]
    assert bob["score"] == pytest.approx(9.0)


def test_a_check_without_a_verdict_is_an_error_naming_the_exit_status(graded):
    carol = graded[2]["carol"]
    (killed,) = checks_named(carol, "1.1")
    assert killed["score"] == 0
    assert "ended without a verdict" in killed["output"] and "status -9" in killed["output"]


def test_a_cache_changed_in_place_is_named_as_the_fault(graded):
    carol = graded[2]["carol"]
    (changed,) = checks_named(carol, "2.2")
    assert changed["score"] == 0
    assert "changed its input cache" in changed["output"] and "in place" in changed["output"]


def test_a_region_that_does_not_compile_is_named(graded):
    carol = graded[2]["carol"]
    for test in checks_named(carol, "4.3") + checks_named(carol, "4.3", hidden=True):
        assert test["score"] == 0
        assert f"exercise 4.3 in {ADAM} does not compile" in test["output"]


def test_hidden_checks_run_after_the_visible_ones_with_their_visibility(graded):
    dave = graded[2]["dave"]
    hidden = checks_named(dave, "2.2", hidden=True)
    assert hidden and all(t["visibility"] == "after_published" for t in hidden)
    assert all(t["visibility"] == "visible" for t in checks_named(dave, "2.2"))
    # an exercise's points are shared by its checks, and a right solution earns them all
    assert sum(t["max_score"] for t in dave["tests"] if t["number"] == "2.2") == pytest.approx(6)
    assert dave["score"] == pytest.approx(17.0)


def test_results_json_has_gradescopes_format(graded):
    for document in graded[2].values():
        assert isinstance(document["score"], float) and document["score"] >= 0
        assert isinstance(document["execution_time"], float)
        assert document["visibility"] in ("hidden", "after_due_date", "after_published", "visible")
        assert document["tests"]
        for test in document["tests"]:
            assert set(test) == GRADESCOPE_TEST_KEYS
            assert 0 <= test["score"] <= test["max_score"]
            assert test["status"] in ("passed", "failed")
            assert isinstance(test["output"], str) and isinstance(test["name"], str)
        assert document["score"] == pytest.approx(sum(t["score"] for t in document["tests"]))


def test_one_csv_per_assignment_with_a_row_per_student_and_a_column_per_exercise(graded):
    out, _, documents = graded
    for assignment, items in COURSE["assignments"].items():
        with open(out / f"{assignment}.csv", newline="") as table:
            rows = list(csv.reader(table))
        assert rows[0] == ["student", *items, "total", "max"]
        assert sorted(r[0] for r in rows[1:]) == sorted(documents)
        for row in rows[1:]:
            scores = [float(v) for v in row[1:-2]]
            assert float(row[-2]) == pytest.approx(sum(scores))
            assert float(row[-1]) == sum(items.values())
    weeks = {r[0]: r for r in csv.reader(open(out / "week-01.csv"))}
    assert weeks["alice"][1:] == ["4.0", "0.0", "4.0", "10.0"]


def test_the_student_tree_has_no_hidden_checks(graded):
    _, subs, _ = graded
    assert not (subs / "alice" / "minidl" / "exercises" / "hidden").exists()
    assert os.path.isdir(os.path.join(ROOT, "minidl", "exercises", "hidden"))


def test_a_folder_without_submissions_or_a_bad_course_file_is_refused(tmp_path, capsys):
    assert main(["exercise", "grade", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "holds no submission" in capsys.readouterr().err
    write_student_tree(tmp_path / "s" / "eve", only=["1.1"])
    course = tmp_path / "c.json"
    course.write_text(json.dumps({"assignments": {"w": {"1.1": 1, "99.9": 2}}}))
    argv = ["exercise", "grade", str(tmp_path / "s"), "--out", str(tmp_path / "o"), "--course"]
    assert main(argv + [str(course)]) == 2
    assert "no exercise '99.9'" in capsys.readouterr().err


def test_only_the_regions_are_taken_and_a_missing_region_counts_as_not_written(tmp_path):
    from minidl.exercises import catalogue
    from minidl_course.submission import graft

    student = tmp_path / "student"
    write_student_tree(student, only=["2.1", "2.2"])
    set_region(str(student), LINEAR, "2.1", "return 'mine'")
    loss = student / LOSS
    loss.write_text(re.sub(r"# (BEGIN|END) EXERCISE 2\.2\n", "", loss.read_text()))
    (student / "minidl" / "functional" / "linear.py").write_text("raise SystemExit('hostile')\n")
    notes = graft(str(student), str(tmp_path / "clean"), catalogue())
    assert notes["2.2"] == [
        f"{LOSS}: region 1 of exercise 2.2 is not in the submission (markers removed or "
        "file missing): graded as not written"
    ]
    clean = tmp_path / "clean"
    assert "    return 'mine'\n" in (clean / LINEAR).read_text()
    assert (
        'raise Unimplemented("2.2", "Softmax cross-entropy backward")' in (clean / LOSS).read_text()
    )
    tuned = "minidl/functional/linear.py"
    assert (clean / tuned).read_text() == open(os.path.join(ROOT, tuned)).read()
