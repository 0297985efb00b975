"""Solutions written outside the project, graded as a student grades them: every verdict right.

Each solution of ``outside/solutions.py`` goes into the regions of its exercise in a student
tree (one tree per solution slot; the other regions of the exercise hold the instructor's
lines), and ``python -m minidl exercise check IDS --json`` runs in that tree. A right
solution in another style than the reference passes; a plainly wrong one fails; one that
gives the right values by other means (another algorithm, the tuned code in the tree, an
input overwritten, an order that relies on MPI buffering) fails, its message naming why.
"""

import json

import pytest

from minidl.exercises import get, hidden_catalogue
from minidl_app.launch import mpi_unavailable_reason
from minidl_course.student import write_student_tree
from minidl_course.submission import region_bodies, write_grades

from .outside.solutions import IN_PROCESS, MPI, by_region
from .test_algorithm_checks import check_in
from .test_submission import ROOT, set_region, solution


def slots(table):
    """How many solutions the exercise with the most has."""
    return max(len(solutions) for _, solutions in table.values())


def tree_with(tmp_path_factory, table, slot):
    """A student tree whose regions of each exercise of ``table`` hold its ``slot``-th
    solution (``slot``: one index for all, or {id: index}; exercises with fewer solutions are
    left out); returns (tree, {id: solution})."""
    pick = slot if isinstance(slot, dict) else dict.fromkeys(table, slot)
    chosen = {i: s[pick[i]] for i, (_, s) in table.items() if pick[i] < len(s)}
    tree = tmp_path_factory.mktemp("outside") / "tree"
    write_student_tree(tree, only=list(chosen))
    counts = {}
    for _path, exercise_id, k in region_bodies(ROOT)[0]:
        if exercise_id in chosen:
            counts[exercise_id] = max(counts.get(exercise_id, 0), k + 1)
    for exercise_id, (_, bodies, _) in chosen.items():
        path = table[exercise_id][0]
        for k in range(counts[exercise_id]):
            body = by_region(bodies).get(k, solution(path, exercise_id, k))
            set_region(str(tree), path, exercise_id, body, k)
    return tree, chosen


def expect_verdicts(results, chosen):
    """Every exercise's verdict against its solution's."""
    wrong = []
    for exercise_id, (kind, _, words) in chosen.items():
        result = results[exercise_id]
        said = f"{result['status']}: {result['message']}"
        if words is None and result["status"] != "passed":
            wrong.append(f"{exercise_id} ({kind}) should pass, got {said}")
        elif words is not None and (result["status"] == "passed" or words not in said):
            wrong.append(f"{exercise_id} ({kind}) should fail saying {words!r}, got {said}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("slot", range(slots(IN_PROCESS)))
def test_in_process_exercises_give_every_outside_solution_its_verdict(tmp_path_factory, slot):
    tree, chosen = tree_with(tmp_path_factory, IN_PROCESS, slot)
    expect_verdicts(check_in(tree, *chosen), chosen)


@pytest.mark.mpi
@pytest.mark.timeout(400)
@pytest.mark.skipif(mpi_unavailable_reason() is not None, reason="needs mpi4py and mpiexec")
@pytest.mark.parametrize("slot", range(slots(MPI)))
def test_mpi_exercises_give_every_outside_solution_its_verdict(tmp_path_factory, slot):
    tree, chosen = tree_with(tmp_path_factory, MPI, slot)
    expect_verdicts(check_in(tree, *chosen), chosen)


EXEMPT = {  # no solution with the right values by other means: why
    "1.1": "every order with the parents first is right, and the Value graph has no tuned twin",
    "5.3": "closed formulas that the tuned model writes inline: no code to call instead",
    "10.4": "the regions are the stash and the swap alone: no other way to the executor's weights",
    "9.3": "the tuned twin of TernGrad is another scheme",
    "9.4": "the tuned twin of the scaled sign is another scheme",
}


@pytest.mark.mpi
@pytest.mark.timeout(400)
@pytest.mark.skipif(mpi_unavailable_reason() is not None, reason="needs mpi4py and mpiexec")
def test_grade_gives_right_solutions_every_point_and_wrong_ones_none_of_the_visible_check(
    tmp_path_factory, tmp_path
):
    """One submission graded as the autograder grades it, each exercise with hidden checks
    holding its right outside solution or its wrong one, in turn: a right one earns every
    point of its checks, hidden ones included; a wrong one fails its visible check."""
    hidden = {e.id for e in hidden_catalogue()}
    table = {i: row for i, row in {**IN_PROCESS, **MPI}.items() if i in hidden}
    tree, chosen = tree_with(tmp_path_factory, table, {i: k % 2 for k, i in enumerate(table)})
    course = tmp_path / "course.json"
    course.write_text(json.dumps({"assignments": {"all": dict.fromkeys(table, 1)}}))
    write_grades(str(tree), str(tmp_path / "out"), str(course))
    with open(tmp_path / "out" / "results.json") as source:
        tests = json.load(source)["tests"]
    wrong = []
    for exercise_id, (kind, _, _) in chosen.items():
        mine = [t for t in tests if t["number"] == exercise_id]
        visible = [t for t in mine if t["visibility"] == "visible"]
        if kind == "right" and any(t["score"] < t["max_score"] for t in mine):
            wrong.append(f"{exercise_id} (right) lost points: {[t['name'] for t in mine]}")
        if kind == "wrong" and any(t["score"] > 0 for t in visible):
            wrong.append(f"{exercise_id} (wrong) scored on its visible check")
    assert len(chosen) == len(table) and not wrong, "\n".join(wrong)


def test_every_exercise_with_outside_solutions_has_a_right_a_wrong_and_a_rule():
    """Each exercise has a right solution and a wrong one, and each but those of ``EXEMPT`` one
    with the right values by other means."""
    for table in (IN_PROCESS, MPI):
        for exercise_id, (path, solutions) in table.items():
            assert get(exercise_id).path == path
            kinds = [kind for kind, _, _ in solutions]
            assert kinds[0] == "right" and "wrong" in kinds, exercise_id
            assert exercise_id in EXEMPT or "not the algorithm" in kinds, exercise_id
