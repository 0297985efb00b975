"""``minidl exercise grade`` under submissions written against the grader: each gets the grade
its regions deserve, no more, within the course's time limit."""

from minidl.exercises import catalogue
from minidl.exercises.student import write_student_tree
from minidl.exercises.submission import graft

from .test_submission import AUTOGRAD, set_region, solution, solve


def test_a_region_that_does_not_parse_is_graded_alone(tmp_path):
    student = tmp_path / "student"
    write_student_tree(student, only=["1.1", "1.2", "1.3"])
    solve(str(student), AUTOGRAD, "1.1", regions=2)
    solve(str(student), AUTOGRAD, "1.2")
    set_region(str(student), AUTOGRAD, "1.3", "grad = (out.grad @ other.data.T\nreturn grad")
    notes = graft(str(student), str(tmp_path / "clean"), catalogue())
    assert list(notes) == ["1.3"]
    (note,) = notes["1.3"]
    assert note.startswith(f"the submitted region 1 of exercise 1.3 in {AUTOGRAD} does not compile")
    assert "line 1 of the region: '(' was never closed" in note
    clean = (tmp_path / "clean" / AUTOGRAD).read_text()
    for exercise_id in ("1.1", "1.2"):
        assert solution(AUTOGRAD, exercise_id).splitlines()[0].strip() in clean
    assert clean.count("raise SyntaxError(") == 1
    compile(clean, AUTOGRAD, "exec")
