"""The student-tree generator on a small fake package.

Stubs, kept markers, the added import, --only, the trace mode, and every
marker error with its file and line.
"""

import importlib.util
import json
import os
import textwrap

import pytest

from minidl.exercises import Exercise, Unimplemented
from minidl.exercises.trace import ENV, read_trace, running
from minidl_course.listing import region_states
from minidl_course.student import MarkerError, find_regions, release, scan_file, write_student_tree

OPS = '''\
"""Fake ops for the generator tests (Fake & Author 2020)."""
from __future__ import annotations

import math


def double(x):
    """Twice x."""
    y = x
    # BEGIN EXERCISE 1.1
    y = 2 * y
    return y
    # END EXERCISE 1.1


class Square:
    def forward(self, x):
        # BEGIN EXERCISE 1.2
        out = x * x
        # END EXERCISE 1.2
        return out

    def backward(self, x, g):
        if g is None:
            return None
        # BEGIN EXERCISE 1.2
        return 2 * x * g
        # END EXERCISE 1.2


def root(x):
    # BEGIN EXERCISE 2.1
    return math.sqrt(x)
    # END EXERCISE 2.1
'''

EXERCISES = [
    Exercise("1.1", "double a number", "minidl/ops.py", "multiply", check=lambda: None),
    Exercise(
        "1.2", "square: forward and backward", "minidl/ops.py", "d(x^2)/dx = 2x", check=lambda: None
    ),
    Exercise("2.1", "square root", "minidl/ops.py", "math has it", check=lambda: None),
]


def make_package(root, ops=OPS, extra=None):
    """A repository root with minidl/{__init__,ops}.py, examples/ and pyproject.toml."""
    (root / "minidl").mkdir(parents=True)
    (root / "minidl" / "__init__.py").write_text('"""fake"""\n')
    (root / "minidl" / "ops.py").write_text(ops)
    for name, text in (extra or {}).items():
        (root / "minidl" / name).write_text(text)
    (root / "examples").mkdir()
    (root / "examples" / "01_demo.py").write_text("print('demo')\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'fake'\n")
    return root


def load(path):
    """Import a generated file as a module (its minidl.exercises import is the real package)."""
    spec = importlib.util.spec_from_file_location(f"generated_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


@pytest.fixture
def tree(tmp_path):
    src = make_package(tmp_path / "src")
    regions = write_student_tree(tmp_path / "out", root=src, exercises=EXERCISES)
    return tmp_path / "out", regions


def test_every_region_becomes_a_raise_between_its_kept_markers(tree):
    out, regions = tree
    assert [(r.exercise_id, r.begin) for r in regions] == [
        ("1.1", 10),
        ("1.2", 18),
        ("1.2", 26),
        ("2.1", 32),
    ]
    text = (out / "minidl" / "ops.py").read_text()
    assert text.count("# BEGIN EXERCISE 1.2") == 2 and text.count("# END EXERCISE 1.2") == 2
    assert "y = 2 * y" not in text and "2 * x * g" not in text and "math.sqrt" not in text
    assert (
        '    """Twice x."""\n    y = x\n    # BEGIN EXERCISE 1.1\n'
        '    raise Unimplemented("1.1", "double a number")\n    # END EXERCISE 1.1\n'
    ) in text
    assert text.count('        raise Unimplemented("1.2", "square: forward and backward")\n') == 2
    # code before a region still runs; code after it stays
    assert "        if g is None:\n            return None\n" in text
    assert "        return out\n" in text


def test_the_import_goes_after_the_docstring_and_future_imports(tree):
    out, _ = tree
    lines = (out / "minidl" / "ops.py").read_text().splitlines()
    assert lines[1] == "from __future__ import annotations"
    assert lines[2] == "from minidl.exercises import Unimplemented"
    assert (out / "minidl" / "__init__.py").read_text() == '"""fake"""\n'


def test_a_stub_raises_unimplemented_naming_the_exercise_and_code_before_it_runs(tree):
    out, _ = tree
    ops = load(out / "minidl" / "ops.py")
    with pytest.raises(Unimplemented, match=r"exercise 1.1 \(double a number\) is not implemented"):
        ops["double"](3)
    assert ops["Square"]().backward(2.0, None) is None
    with pytest.raises(Unimplemented) as raised:
        ops["Square"]().backward(2.0, 1.0)
    assert raised.value.exercise_id == "1.2"
    lines = (out / "minidl" / "ops.py").read_text().splitlines()
    stub = max(i for i, line in enumerate(lines, 1) if 'Unimplemented("1.2"' in line)
    assert raised.value.where == f"{out / 'minidl' / 'ops.py'}:{stub}"


def test_the_tree_has_the_package_examples_pyproject_and_a_student_readme(tree):
    out, _ = tree
    assert sorted(os.listdir(out)) == [
        "README.md",
        "examples",
        "exercises.json",
        "minidl",
        "pyproject.toml",
    ]
    readme = (out / "README.md").read_text()
    assert "python -m minidl exercise check x.y" in readme
    for e in EXERCISES:
        assert e.id in readme and e.title in readme


def test_only_hands_out_the_chosen_exercises_and_no_other_solution(tmp_path):
    src = make_package(tmp_path / "src")
    regions = write_student_tree(tmp_path / "out", only=["2.1"], root=src, exercises=EXERCISES)
    assert sorted({r.exercise_id for r in regions}) == ["1.1", "1.2", "2.1"]
    ops = load(tmp_path / "out" / "minidl" / "ops.py")
    with pytest.raises(Unimplemented, match="exercise 2.1"):
        ops["root"](4.0)
    with pytest.raises(Unimplemented, match="not released yet"):
        ops["double"](3)
    text = (tmp_path / "out" / "minidl" / "ops.py").read_text()
    assert "y = 2 * y" not in text and "2 * x * g" not in text and "math.sqrt" not in text
    assert region_states(tmp_path / "out", EXERCISES) == {
        "1.1": "not released",
        "1.2": "not released",
        "2.1": "to do",
    }


def test_release_adds_stubs_and_keeps_the_students_work(tmp_path):
    src = make_package(tmp_path / "src")
    out = tmp_path / "out"
    write_student_tree(out, only=["2.1"], root=src, exercises=EXERCISES)
    ops_path = out / "minidl" / "ops.py"
    work = ops_path.read_text().replace(
        '    raise Unimplemented("2.1", "square root")\n', "    return x ** 0.5  # mine\n"
    )
    ops_path.write_text(work)
    (out / "notes.txt").write_text("my notes")
    assert release(out, ["1.1", "2.1"], exercises=EXERCISES) == ["1.1"]
    text = ops_path.read_text()
    assert "    return x ** 0.5  # mine\n" in text and (out / "notes.txt").read_text() == "my notes"
    assert '    raise Unimplemented("1.1", "double a number")\n' in text
    assert region_states(out, EXERCISES) == {
        "1.1": "to do",
        "1.2": "not released",
        "2.1": "written",
    }
    assert json.loads((out / "exercises.json").read_text()) == {"released": ["1.1", "2.1"]}
    assert "double a number" in (out / "README.md").read_text()
    with pytest.raises(FileNotFoundError, match="not a student tree"):
        release(src, ["1.1"], exercises=EXERCISES)
    with pytest.raises(MarkerError, match="unknown exercises 7.7"):
        release(out, ["7.7"], exercises=EXERCISES)


def test_trace_mode_keeps_the_solutions_and_records_each_region_once(tmp_path, monkeypatch):
    src = make_package(tmp_path / "src")
    write_student_tree(tmp_path / "out", mode="trace", root=src, exercises=EXERCISES)
    ops = load(tmp_path / "out" / "minidl" / "ops.py")
    trace = tmp_path / "trace.tsv"
    monkeypatch.setenv(ENV, str(trace))
    with running("1.2"):
        for _ in range(3):
            assert ops["Square"]().forward(3.0) == 9.0
            assert ops["Square"]().backward(3.0, 1.0) == 6.0
    with running("2.1"):
        assert ops["root"](9.0) == 3.0
    assert read_trace(trace) == {
        "1.2": {("1.2", "minidl/ops.py:18"), ("1.2", "minidl/ops.py:26")},
        "2.1": {("2.1", "minidl/ops.py:32")},
    }
    assert len(trace.read_text().splitlines()) == 3


def test_an_existing_folder_is_not_overwritten(tmp_path):
    src = make_package(tmp_path / "src")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not empty"):
        write_student_tree(tmp_path / "out", root=src, exercises=EXERCISES)


def marker_problems(tmp_path, source):
    """The problems the generator reports for ``minidl/bad.py`` holding ``source``
    (exercise 1.1)."""
    root = make_package(tmp_path / "src", ops="", extra={"bad.py": textwrap.dedent(source)})
    exercises = [Exercise("1.1", "double a number", "minidl/bad.py", "-", check=lambda: None)]
    with pytest.raises(MarkerError) as raised:
        write_student_tree(tmp_path / "out", root=root, exercises=exercises)
    assert not (tmp_path / "out").exists(), "nothing is written when a marker is wrong"
    return raised.value.problems


GOOD = "def f(x):\n    # BEGIN EXERCISE 1.1\n    return x\n    # END EXERCISE 1.1\n"
BAD = {
    "unbalanced BEGIN": (
        GOOD.replace("    # END EXERCISE 1.1\n", ""),
        "minidl/bad.py:2: BEGIN EXERCISE 1.1 has no END EXERCISE 1.1 after it",
    ),
    "unbalanced END": (
        GOOD.replace("    # BEGIN EXERCISE 1.1\n", ""),
        "minidl/bad.py:3: END EXERCISE 1.1 has no BEGIN EXERCISE 1.1 before it",
    ),
    "nested": (
        GOOD.replace("    # BEGIN EXERCISE 1.1\n", 2 * "    # BEGIN EXERCISE 1.1\n").replace(
            "    # END EXERCISE 1.1\n", 2 * "    # END EXERCISE 1.1\n"
        ),
        "minidl/bad.py:3: BEGIN EXERCISE 1.1 is nested inside region 1.1 opened at line 2",
    ),
    "mismatched ids": (
        GOOD.replace("END EXERCISE 1.1", "END EXERCISE 1.2"),
        "minidl/bad.py:4: END EXERCISE 1.2 closes region 1.1 opened at line 2",
    ),
    "unregistered id": (
        GOOD.replace("1.1", "7.7") + GOOD.replace("f(x)", "g(x)"),
        "minidl/bad.py:2: region 7.7 has no registered exercise",
    ),
    "outside a function": (
        """
        # BEGIN EXERCISE 1.1
        X = 1
        # END EXERCISE 1.1
        """,
        "minidl/bad.py:2: region 1.1 is outside a function body",
    ),
    "in a class body": (
        """
        def f():
            class A:
                # BEGIN EXERCISE 1.1
                x = 1
                # END EXERCISE 1.1
            return A
        """,
        "minidl/bad.py:4: region 1.1 is outside a function body",
    ),
    "two blocks": (
        """
        def f(x):
            if x:
                # BEGIN EXERCISE 1.1
                y = 1
            else:
                y = 2
                # END EXERCISE 1.1
            return y
        """,
        "minidl/bad.py:4: region 1.1 spans more than one block",
    ),
    "part of a statement": (
        """
        def f(x):
            y = (x,
            # BEGIN EXERCISE 1.1
                 x)
            return y
            # END EXERCISE 1.1
        """,
        "minidl/bad.py:4: region 1.1 cuts the statement at line 3",
    ),
    "markers not at the statements' indentation": (
        """
        def f(x):
            for i in range(3):
            # BEGIN EXERCISE 1.1
                x += i
            # END EXERCISE 1.1
            return x
        """,
        "minidl/bad.py:4: the markers of region 1.1 are indented 4 columns, its statements 8",
    ),
    "empty": (
        """
        def f(x):
            # BEGIN EXERCISE 1.1
            # END EXERCISE 1.1
            return x
        """,
        "minidl/bad.py:3: region 1.1 holds no code",
    ),
    "malformed marker": (
        GOOD + "    # begin exercise 1.2\n",
        "minidl/bad.py:5: '# begin exercise 1.2' is not a marker",
    ),
    "trailing marker": (
        GOOD + "y = 1  # BEGIN EXERCISE 1.1\n",
        "minidl/bad.py:5: '# BEGIN EXERCISE 1.1' is not a marker",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_each_marker_problem_is_reported_with_its_file_and_line(tmp_path, case):
    source, expected = BAD[case]
    problems = marker_problems(tmp_path, source)
    assert any(p.startswith(expected) for p in problems), problems


def test_an_exercise_without_a_region_and_a_region_in_the_wrong_file_are_reported(tmp_path):
    src = make_package(
        tmp_path / "src",
        extra={
            "other.py": "def g():\n    # BEGIN EXERCISE 9.1\n    pass\n    # END EXERCISE 9.1\n"
        },
    )
    exercises = EXERCISES + [
        Exercise("9.1", "elsewhere", "minidl/ops.py", "-", check=lambda: None),
        Exercise("9.2", "nowhere", "minidl/ops.py", "-", check=lambda: None),
    ]
    with pytest.raises(MarkerError) as raised:
        write_student_tree(tmp_path / "out", root=src, exercises=exercises)
    assert raised.value.problems == [
        "minidl/other.py:2: region 9.1 is in this file, but exercise 9.1's path is minidl/ops.py",
        (
            "minidl/ops.py: exercise 9.2 (nowhere) has no region: mark its code with "
            "'# BEGIN EXERCISE 9.2' / '# END EXERCISE 9.2'"
        ),
    ]
    assert "minidl/other.py:2" in str(raised.value)


def test_only_with_an_unknown_id_is_an_error(tmp_path):
    src = make_package(tmp_path / "src")
    with pytest.raises(MarkerError, match="unknown exercises 5.5"):
        write_student_tree(tmp_path / "out", only=["1.1", "5.5"], root=src, exercises=EXERCISES)


def test_markers_inside_strings_are_not_regions():
    regions, problems = scan_file('def f():\n    """\n    # BEGIN EXERCISE 1.1\n    """\n', "m.py")
    assert regions == [] and problems == []


def test_the_repository_markers_are_consistent():
    from minidl.exercises import catalogue, repository_root
    from minidl_course.student import validate

    regions, problems = find_regions(repository_root())
    assert problems + validate(regions, catalogue()) == []
