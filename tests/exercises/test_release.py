"""Private, releasable student trees and commands that check the tree they run in."""

import json
import os
import subprocess
import sys

import pytest

from minidl.exercises import repository_root
from minidl_course.privacy import VISIBLE_IN_TUNED_CODE, find_solutions, leaks, solution_lines
from minidl_course.student import write_student_tree

from .test_submission import set_region, solve

ROOT = repository_root()
WEEK_1 = ["1.1", "1.2", "1.3"]


@pytest.fixture(scope="module")
def week_1(tmp_path_factory):
    tree = tmp_path_factory.mktemp("course") / "tree"
    write_student_tree(tree, only=WEEK_1)
    return tree


def run_in(folder, *argv, pythonpath=ROOT):
    """``python -m minidl ARGV`` in ``folder`` with ``pythonpath`` (default: this checkout, as an
    installed minidl would be) first on the path."""
    return subprocess.run(
        [sys.executable, "-m", "minidl", *argv],
        cwd=folder,
        env=dict(os.environ, PYTHONPATH=str(pythonpath)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_search_finds_the_solutions_in_the_instructors_tree():
    solutions = solution_lines(ROOT)
    found = {exercise_id for _, _, exercise_id in find_solutions(ROOT, solutions)}
    assert len(found) >= 25  # the oracle of the privacy test below sees what it looks for


def test_the_search_reads_the_trees_code_and_not_its_hidden_folders(tmp_path):
    solutions = solution_lines(ROOT, ids={"1.1"})
    line, _ = next(iter(solutions.items()))
    for folder in ("examples", ".venv/lib"):
        os.makedirs(tmp_path / folder)
        (tmp_path / folder / "copied.py").write_text(f"{line}\n")
    found = find_solutions(tmp_path, solutions)
    assert [(os.path.dirname(path), exercise) for path, _, exercise in found] == [
        ("examples", "1.1")
    ]


def test_a_student_tree_holds_no_solution_of_an_exercise_it_does_not_hand_out(week_1):
    found = leaks(week_1)
    assert found == [], (
        f"solution lines in a week-1 tree: {found}; if tuned code implements an exercise in the "
        "same form, list the file in VISIBLE_IN_TUNED_CODE (minidl_course/privacy.py) and in "
        "the guide's table, else remove the copy"
    )
    assert not (week_1 / "minidl" / "exercises" / "hidden").exists()


def test_what_stays_visible_in_tuned_code_is_listed_in_the_guide():
    with open(os.path.join(ROOT, "docs", "instructor-guide.md")) as guide:
        text = guide.read()
    for exercise_id, paths in VISIBLE_IN_TUNED_CODE.items():
        for path in paths:
            assert f"| {exercise_id} | `{path}` |" in text


def test_release_into_a_tree_with_student_work_keeps_that_work(week_1, tmp_path):
    tree = tmp_path / "tree"
    write_student_tree(tree, only=WEEK_1)
    solve(str(tree), "minidl/reference/autograd.py", "1.1", regions=2)
    mine = (tree / "minidl" / "reference" / "autograd.py").read_text()
    done = run_in(tmp_path, "exercise", "release", str(tree), "2.1,2.2")
    assert done.returncode == 0, done.stderr
    assert "released 2.1, 2.2" in done.stdout
    assert (tree / "minidl" / "reference" / "autograd.py").read_text() == mine
    assert json.loads((tree / "exercises.json").read_text())["released"] == WEEK_1 + ["2.1", "2.2"]
    status = run_in(tree, "exercise", "status", pythonpath=tree)
    rows = {line.split()[0]: line for line in status.stdout.splitlines()[2:] if line[:1].isdigit()}
    assert rows["1.1"].endswith("passes        1/1")
    assert rows["1.2"].endswith("not started   0/1")
    assert rows["2.1"].endswith("not started   0/1")
    assert rows["2.3"].endswith("not released  0/0")
    assert {exercise_id for _, _, exercise_id in leaks(tree)} == {"1.1"}  # the student's own


def test_check_run_inside_a_student_tree_by_another_minidl_checks_that_tree(week_1):
    done = run_in(week_1 / "minidl" / "reference", "exercise", "check", "1.1", "--json")
    assert "this folder's tree" in done.stderr
    document = json.loads(done.stdout)
    assert os.path.samefile(document["root"], week_1)
    assert document["results"][0]["status"] == "unimplemented"


def test_the_examples_import_the_tree_they_sit_in(week_1):
    script = week_1 / "examples" / "where.py"
    script.write_text("import minidl\nprint(minidl.__file__)\n")
    done = subprocess.run(
        [sys.executable, str(script)],
        env=dict(os.environ, PYTHONPATH=ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    script.unlink()
    assert os.path.samefile(done.stdout.strip(), week_1 / "examples" / "minidl" / "__init__.py")
    assert os.path.samefile(week_1 / "examples" / "minidl", week_1 / "minidl")


def test_a_written_region_passes_in_status_and_a_wrong_one_fails(tmp_path):
    tree = tmp_path / "tree"
    write_student_tree(tree, only=["2.2"])
    set_region(str(tree), "minidl/reference/functional/loss.py", "2.2", "return cache[0] * 0")
    status = run_in(tree, "exercise", "status", pythonpath=tree)
    assert status.returncode == 1
    (row,) = [line for line in status.stdout.splitlines() if line.startswith("2.2 ")]
    assert row.endswith("fails         0/1")


def test_check_all_in_a_student_tree_checks_the_exercises_handed_out(week_1):
    done = run_in(week_1, "exercise", "check", "--all", "--json", pythonpath=week_1)
    assert [r["id"] for r in json.loads(done.stdout)["results"]] == WEEK_1


def test_check_hidden_runs_the_hidden_checks_in_the_instructors_tree_only(week_1):
    done = run_in(ROOT, "exercise", "check", "2.2", "--hidden", "--json")
    results = json.loads(done.stdout)["results"]
    assert [(r["id"], bool(r["test"]), r["status"]) for r in results] == [
        ("2.2", False, "passed"),
        ("2.2", True, "passed"),
    ]
    mine = run_in(week_1, "exercise", "check", "1.1", "--hidden", "--json", pythonpath=week_1)
    assert len(json.loads(mine.stdout)["results"]) == 1


def test_release_with_a_mistyped_id_names_it(week_1, tmp_path):
    done = run_in(tmp_path, "exercise", "release", str(week_1), "2.1,6.11")
    assert done.returncode == 1
    assert "release names unknown exercises 6.11 (did you mean 6.1" in done.stderr
    assert "markers" not in done.stderr
    assert json.loads((week_1 / "exercises.json").read_text())["released"] == WEEK_1


def test_status_shows_the_released_weeks_and_names_the_others(week_1):
    status = run_in(week_1, "exercise", "status", pythonpath=week_1)
    rows = [line.split()[0] for line in status.stdout.splitlines() if line[:1].isdigit()]
    assert [r for r in rows if "." in r] == WEEK_1
    assert "1-autograd: 0 of 3 points" in status.stdout
    (later,) = [line for line in status.stdout.splitlines() if line.startswith("not released")]
    assert later.startswith("not released yet: 2-layers, 3-conv")
