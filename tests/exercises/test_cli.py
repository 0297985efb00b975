"""``minidl exercise list | check | student``: output and exit status (fake exercises, in
process)."""

import json

import pytest

from minidl_app.cli import COMMANDS, main


def run(capsys, *argv):
    status = main(["exercise", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_command_is_registered():
    assert COMMANDS["exercise"][0] == "minidl_course.command"


def test_list_shows_id_title_and_file(fake_exercises, capsys):
    status, out, _ = run(capsys, "list")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "title", "file"]
    row = next(line for line in lines if line.startswith("90.2 "))
    assert row.split() == ["90.2", "fails", "tests/exercises/fake_student.py"]


def test_list_markdown_has_a_table_row_per_exercise(fake_exercises, capsys):
    status, out, _ = run(capsys, "list", "--markdown")
    assert status == 0
    assert "### 90. Fake checks" in out
    for e in fake_exercises.values():
        assert f"| {e.id} | {e.title} | A stand-in for a student's file" in out


def test_check_passing_exits_zero(fake_exercises, capsys):
    status, out, _ = run(capsys, "check", "90.1")
    assert status == 0
    assert "90.1   passes ... passed" in out
    assert out.rstrip().endswith("1 passed")


def test_check_failing_exits_non_zero_with_expected_got_and_hint(fake_exercises, capsys):
    status, out, _ = run(capsys, "check", "90.1", "90.2", "90.3")
    assert status == 1
    assert "90.2   fails ... FAILED" in out
    assert "expected: 6.0" in out and "got:      7.0" in out
    assert "hint: look at the last element" in out
    assert "90.3   not written ... not implemented yet" in out
    assert out.rstrip().endswith("1 passed, 1 failed, 1 not implemented yet")


@pytest.mark.parametrize(
    "exercise_id, verdict",
    [
        ("90.6", "90.6   never ends ... TIMED OUT"),
        pytest.param("91.3", "91.3   waits for nobody ... TIMED OUT", marks=pytest.mark.mpi),
    ],
)
def test_check_timeout_replaces_each_exercises_own(fake_exercises, capsys, exercise_id, verdict):
    status, out, _ = run(capsys, "check", exercise_id, "--timeout", "1.5")
    assert status == 1
    assert verdict in out
    assert "after 1.5 s" in out


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "soon"])
def test_check_timeout_must_be_a_positive_number(fake_exercises, capsys, bad):
    with pytest.raises(SystemExit) as stop:
        run(capsys, "check", "90.1", "--timeout", bad)
    assert stop.value.code == 2
    assert f"--timeout: {bad!r} is not a finite number > 0" in capsys.readouterr().err


def test_check_json_is_one_document(fake_exercises, capsys):
    status, out, _ = run(capsys, "check", "90.2", "90.4", "--json")
    assert status == 1
    document = json.loads(out)
    assert [(r["id"], r["status"]) for r in document["results"]] == [
        ("90.2", "failed"),
        ("90.4", "error"),
    ]
    assert document["results"][1]["message"].startswith("ZeroDivisionError")
    assert document["summary"]["failed"] == 1 and document["summary"]["error"] == 1


def test_check_unknown_id_or_nothing_to_check_exits_two(fake_exercises, capsys):
    status, _, err = run(capsys, "check", "90.99")
    assert status == 2 and "no exercise '90.99'" in err and "90.1" in err
    status, _, err = run(capsys, "check")
    assert status == 2 and "--all" in err


def test_student_writes_a_tree_and_refuses_a_used_folder(tmp_path, capsys):
    status, out, _ = run(capsys, "student", str(tmp_path / "tree"))
    assert status == 0 and out.startswith(f"wrote {tmp_path / 'tree'}:")
    assert (tmp_path / "tree" / "minidl" / "__init__.py").exists()
    assert (tmp_path / "tree" / "README.md").exists()
    status, _, err = run(capsys, "student", str(tmp_path / "tree"))
    assert status == 1 and "not empty" in err


def test_student_only_with_an_unknown_id_exits_one(tmp_path, capsys):
    status, _, err = run(capsys, "student", str(tmp_path / "tree"), "--only", "0.0,0.1")
    assert status == 1 and "unknown exercises 0.0, 0.1" in err


def test_list_markdown_update_rewrites_the_block_of_a_file(fake_exercises, capsys, tmp_path):
    from minidl_course.listing import BEGIN_LIST, END_LIST

    guide = tmp_path / "guide.md"
    guide.write_text(f"# Guide\n{BEGIN_LIST}\nstale\n{END_LIST}\nthe end\n")
    status, out, _ = run(capsys, "list", "--markdown", "--update", str(guide))
    assert status == 0 and out.startswith(f"updated the exercise list in {guide}")
    text = guide.read_text()
    assert "stale" not in text and "| 90.2 | fails |" in text
    assert text.startswith("# Guide\n") and text.endswith(f"{END_LIST}\nthe end\n")


def test_list_status_says_which_regions_are_stubs(fake_exercises, capsys):
    status, out, _ = run(capsys, "list", "--status")
    assert status == 0
    assert out.splitlines()[0].split() == ["id", "title", "file", "state"]


def test_a_check_module_that_does_not_import_is_named_with_its_line(
    fake_exercises, capsys, monkeypatch
):
    def broken():
        compile("def f(:\n", "minidl/reference/broken.py", "exec")

    monkeypatch.setattr("minidl_course.command.catalogue", broken)
    status, _, err = run(capsys, "check", "--all")
    assert status == 2
    assert err.startswith("cannot load the exercises: minidl/reference/broken.py, line 1:")


@pytest.mark.parametrize("action", [("check", "--all"), ("student", "TREE")])
def test_an_error_raised_while_a_module_imports_is_one_line_with_its_place(
    fake_exercises, capsys, monkeypatch, tmp_path, action
):
    def broken():
        exec(compile("import math\nmath.tau = math.pie\n", "minidl/reference/broken.py", "exec"))

    monkeypatch.setattr("minidl_course.command.catalogue", broken)
    status, _, err = run(capsys, *[str(tmp_path / a) if a == "TREE" else a for a in action])
    assert status == 2
    assert err.startswith("cannot load the exercises: AttributeError:")
    assert "(minidl/reference/broken.py, line 2)" in err and err.count("\n") == 1
    assert not (tmp_path / "TREE").exists()
