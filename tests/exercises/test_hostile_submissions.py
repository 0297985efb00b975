"""``minidl exercise grade`` under submissions written against the grader: each gets the grade
its regions deserve, no more, within the course's time limit."""

import json
import os
import time

import pytest

from minidl.exercises import catalogue, repository_root
from minidl_app.cli import main
from minidl_app.launch import mpi_unavailable_reason
from minidl_course.student import write_student_tree
from minidl_course.submission import graft

from .test_submission import ADAM, AUTOGRAD, LOSS, checks_named, set_region, solution, solve

HALO = "minidl/reference/dist/halo.py"
COURSE = {"assignments": {"w": {"1.1": 4, "1.2": 3, "1.3": 3, "2.2": 6, "4.3": 5}}}
EDIT_THE_GRADER_THEN_DIE = r'''import os, re, signal
import minidl.exercises as grader
text = open(grader.__file__).read()
for name in ("expect_close", "expect_equal", "expect_true"):
    text = re.sub(rf'(def {name}\(.*?\):\n    """.*?"""\n)', r"\1    return\n", text, flags=re.S)
open(grader.__file__, "w").write(text)
import minidl_course.grader as course  # and the course tooling's verdicts: every one a pass
with open(course.__file__, "a") as out:
    out.write("\n_verdict = verdict_of\n\n\ndef verdict_of(exercise, status, *rest):\n"
              "    return _verdict(exercise, 'passed', *rest)\n")
os.kill(os.getpid(), signal.SIGKILL)'''
PATCH_THE_CHECKS_IN_MEMORY = """import sys
def quiet(*args, **keywords):
    return None
for name, module in list(sys.modules.items()):
    if name.startswith("minidl.exercises"):
        for function in ("expect_close", "expect_equal", "expect_true"):
            if hasattr(module, function):
                getattr(module, function).__code__ = quiet.__code__
return grad * 0"""
READ_THE_HIDDEN_CHECKS = """import glob, inspect, os, sys
import minidl
hidden = os.path.join(os.path.dirname(minidl.__file__), "exercises", "hidden")
for path in sorted(glob.glob(os.path.join(hidden, "*"))):
    print(open(path, encoding="utf-8", errors="replace").read())
for name, module in list(sys.modules.items()):
    if ".hidden." in name:
        try:
            print(inspect.getsource(module))
        except (OSError, TypeError) as exc:
            print(name, type(exc).__name__)
print("found", sorted(os.listdir(hidden)))
return p * 0"""
PRINT_EVERYTHING = r"""import os
os.write(1, os.urandom(3 << 20) + b"\n")  # its last line ends here, not in the next one
os.write(1, "a NUL\x00 and a right-to-left override\u202e here\n".encode())
os.write(2, b"x" * 20000 + b"\n")
"""
FORGE_THE_VERDICT = r"""import json, os, signal, stat
from minidl_course.grader import Result
claim = json.dumps([Result("1.2", "", "", "passed").to_json()]).encode()
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, claim)
    except OSError:
        pass
os.kill(os.getpid(), signal.SIGKILL)"""
FORGE_THE_RANKS_REPORTS = """import sys
from minidl.exercises import hidden_catalogue
runner = sys.modules["minidl_course.mpi_runner"]
for key in ["12.1"] + [e.key for e in hidden_catalogue() if e.id == "12.1"]:
    for rank in range(comm.size):
        runner.report(key, rank, "passed", "", 0.0)"""
HIDDEN_SOURCE = "rng = np.random.default_rng(2201)"  # a line of minidl/exercises/hidden/layers.py


def garbage(tree):
    """Wrong answers for 2.2 and 4.3: no points are due for them."""
    set_region(tree, LOSS, "2.2", "return p * 0")
    set_region(tree, ADAM, "4.3", "return w, state")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Seven hostile submissions graded once: ``({student: results.json}, results.json bytes)``."""
    base = tmp_path_factory.mktemp("hostile")
    subs = base / "subs"
    names = ("syntax", "editkill", "patcher", "reader", "chatty", "parentkill", "forger")
    for name in names:
        write_student_tree(subs / name, only=list(COURSE["assignments"]["w"]))
    syntax = str(subs / "syntax")  # 1.1 and 1.2 right, 1.3 with an unclosed bracket
    solve(syntax, AUTOGRAD, "1.1", regions=2)
    solve(syntax, AUTOGRAD, "1.2")
    set_region(syntax, AUTOGRAD, "1.3", "grad = (out.grad @ other.data.T\nreturn grad")
    for name, body in (
        ("editkill", EDIT_THE_GRADER_THEN_DIE),
        ("patcher", PATCH_THE_CHECKS_IN_MEMORY),
        ("forger", FORGE_THE_VERDICT),
    ):
        set_region(str(subs / name), AUTOGRAD, "1.2", body)
        garbage(str(subs / name))
    parentkill = str(subs / "parentkill")  # kills the grading process; 1.3 right
    set_region(
        parentkill, AUTOGRAD, "1.2", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"
    )
    solve(parentkill, AUTOGRAD, "1.3")
    reader = str(subs / "reader")
    set_region(reader, LOSS, "2.2", READ_THE_HIDDEN_CHECKS)
    chatty = str(subs / "chatty")  # right 1.1, after printing megabytes and control characters
    solve(chatty, AUTOGRAD, "1.1", regions=2)
    set_region(chatty, AUTOGRAD, "1.1", PRINT_EVERYTHING + solution(AUTOGRAD, "1.1", 1), 1)
    course = base / "course.json"
    course.write_text(json.dumps(COURSE))
    out = base / "grades"
    assert main(["exercise", "grade", str(subs), "--out", str(out), "--course", str(course)]) == 0
    texts = {n: (out / n / "results.json").read_bytes() for n in os.listdir(subs)}
    return {n: json.loads(t) for n, t in texts.items()}, texts


def scores(document):
    found = {}
    for test in document["tests"]:
        found[test["number"]] = found.get(test["number"], 0.0) + test["score"]
    return found


def test_a_region_that_does_not_parse_is_graded_alone(hostile, tmp_path):
    document = hostile[0]["syntax"]
    assert scores(document) == {"1.1": 4, "1.2": 3, "1.3": 0, "2.2": 0, "4.3": 0}
    (broken,) = checks_named(document, "1.3")
    assert (
        f"the submitted region 1 of exercise 1.3 in {AUTOGRAD} does not compile"
        in (broken["output"])
    )
    assert "line 1 of the region: '(' was never closed" in broken["output"]
    assert "not in the submission" not in json.dumps(document)


def test_editing_the_grader_and_killing_the_check_moves_no_other_verdict(hostile):
    document = hostile[0]["editkill"]
    assert document["score"] == 0
    (killed,) = checks_named(document, "1.2")
    assert "ended without a verdict" in killed["output"] and "status -9" in killed["output"]
    assert "changed the grader's files (minidl/exercises/__init__.py" in killed["output"]
    assert "minidl_course/grader.py" in killed["output"]
    assert "put back before the next check" in killed["output"]
    with open(os.path.join(repository_root(), "minidl_course", "grader.py")) as source:
        assert "_verdict = verdict_of" not in source.read()  # the copy was edited, not this
    for test in checks_named(document, "2.2") + checks_named(document, "4.3"):
        assert test["status"] == "failed" and "FAILED" in test["output"]


def test_killing_the_grading_process_costs_the_check_that_did_it_only(hostile):
    document = hostile[0]["parentkill"]
    (killed,) = checks_named(document, "1.2")
    assert "ended without a verdict: the grading process ended with status -9" in killed["output"]
    assert scores(document) == {"1.1": 0, "1.2": 0, "1.3": 3, "2.2": 0, "4.3": 0}


def test_patching_the_checks_in_memory_moves_no_verdict(hostile):
    document = hostile[0]["patcher"]
    assert document["score"] == 0
    (patched,) = checks_named(document, "1.2")
    assert "changed the grader in memory (minidl.exercises" in patched["output"]
    for test in checks_named(document, "2.2") + checks_named(document, "4.3"):
        assert "FAILED" in test["output"]


def test_a_verdict_forged_in_the_checks_process_is_judged_by_its_evidence(hostile):
    document = hostile[0]["forger"]
    (forged,) = checks_named(document, "1.2")
    assert forged["status"] == "failed" and forged["score"] == 0
    assert "the check passed in the process that ran the code" in forged["output"]
    assert "sent no record of its comparisons" in forged["output"]
    assert document["score"] == 0


@pytest.mark.mpi
def test_reports_forged_for_every_rank_are_judged_by_their_evidence(tmp_path):
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    tree = tmp_path / "subs" / "forger"
    write_student_tree(tree, only=["12.1"])
    set_region(str(tree), HALO, "12.1", FORGE_THE_RANKS_REPORTS)
    course = tmp_path / "course.json"
    course.write_text(json.dumps({"assignments": {"w": {"12.1": 2}}}))
    argv = ["exercise", "grade", str(tree), "--out", str(tmp_path / "out"), "--course"]
    assert main(argv + [str(course)]) == 0
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["score"] == 0 and len(document["tests"]) >= 2
    for test in document["tests"]:
        assert "the check passed in the process that ran the code" in test["output"]
        assert "sent no record of its comparisons for every rank" in test["output"]


def test_the_hidden_checks_source_cannot_be_read_from_the_clean_copy(hostile):
    document, texts = hostile
    (visible,) = checks_named(document["reader"], "2.2")
    assert "'layers.pyc'" in visible["output"] and "'layers.py'" not in visible["output"]
    with open(os.path.join(repository_root(), "minidl", "exercises", "hidden", "layers.py")) as f:
        assert HIDDEN_SOURCE in f.read()
    assert HIDDEN_SOURCE.encode() not in texts["reader"]
    assert document["reader"]["score"] == 0


def test_huge_and_binary_output_is_capped_and_escaped(hostile):
    document, texts = hostile
    chatty = document["chatty"]
    assert scores(chatty)["1.1"] == 4
    assert len(texts["chatty"]) < 64 * 1024
    (test,) = checks_named(chatty, "1.1")
    printed = test["output"]
    assert "\x00" not in printed and "\u202e" not in printed
    assert "a NUL\\x00 and a right-to-left override\\u202e here" in printed
    assert "more characters" in printed
    assert max(len(line) for line in printed.splitlines()) < 400
    assert len(printed) < 5000


def grade_hanging(tmp_path, exercises, limit):
    """Grade a submission whose every region of ``exercises`` loops forever (or sleeps in C)
    under a course ``time_limit`` of ``limit`` s: ``(results.json, seconds taken)``."""
    tree = tmp_path / "subs" / "sleeper"
    write_student_tree(tree, only=list(exercises))
    for e in catalogue():
        for k in range(2 if e.id == "1.1" else 1):
            if e.id in exercises:
                body = (
                    "import time\ntime.sleep(10**6)" if e.id == "1.3" else "while True:\n    pass"
                )
                set_region(str(tree), e.path, e.id, body, k)
    course = tmp_path / "course.json"
    course.write_text(json.dumps({"assignments": {"w": exercises}, "time_limit": limit}))
    start = time.time()
    argv = ["exercise", "grade", str(tree), "--out", str(tmp_path / "out"), "--course"]
    assert main(argv + [str(course)]) == 0
    return json.loads((tmp_path / "out" / "results.json").read_text()), time.time() - start


def test_a_submission_that_hangs_everywhere_is_graded_within_the_time_limit(tmp_path):
    exercises = {"1.1": 4, "1.2": 3, "1.3": 3, "2.2": 6, "4.3": 5}
    document, seconds = grade_hanging(tmp_path, exercises, 30)
    assert seconds < 30
    assert document["score"] == 0 and len(document["tests"]) >= 7
    for test in document["tests"]:
        assert "TIMED OUT" in test["output"]
        assert "no answer after" in test["output"] or "not run: the 30 s" in test["output"]
    assert any("no answer after" in t["output"] for t in document["tests"])


@pytest.mark.mpi
def test_mpi_checks_that_hang_everywhere_fit_the_time_limit(tmp_path):
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    document, seconds = grade_hanging(tmp_path, {"6.1": 5}, 20)
    assert seconds < 20
    assert [t["score"] for t in document["tests"]] == [0, 0]
    assert all("TIMED OUT" in t["output"] for t in document["tests"])


def test_graft_keeps_the_hidden_checks_out_as_source(tmp_path):
    student = tmp_path / "student"
    write_student_tree(student, only=["2.2"])
    graft(str(student), str(tmp_path / "clean"), catalogue())
    hidden = tmp_path / "clean" / "minidl" / "exercises" / "hidden"
    assert sorted(os.listdir(hidden)) == sorted(
        name + "c"
        for name in os.listdir(os.path.join(repository_root(), "minidl/exercises/hidden"))
        if name.endswith(".py")
    )


def test_a_course_file_with_a_bad_time_limit_or_user_is_refused(tmp_path, capsys):
    write_student_tree(tmp_path / "s" / "eve", only=["1.1"])
    argv = ["exercise", "grade", str(tmp_path / "s"), "--out", str(tmp_path / "o"), "--course"]
    course = tmp_path / "c.json"
    for settings, error in (
        ({"time_limit": 5}, "time_limit must be the seconds grading one submission may take"),
        ({"check_user": "no-such-user-here"}, "check_user 'no-such-user-here' is not a user"),
    ):
        course.write_text(json.dumps({"assignments": {"w": {"1.1": 1}}, **settings}))
        assert main(argv + [str(course)]) == 2
        assert error in capsys.readouterr().err


def test_a_grader_run_as_root_says_what_the_checks_reach_when_nobody_cannot_run_them(
    tmp_path, capsys
):
    """Without ``check_user`` a grader run as root runs the checks as ``nobody`` where it can
    (the next test); where it cannot, the grade is the same and the instructor is told why."""
    from minidl_course.submission import can_run_checks_as

    if os.geteuid() != 0:
        pytest.skip("the grader picks a user for the checks only when it runs as root")
    try:
        can_run_checks_as("nobody")
        pytest.skip("nobody can run this Python: the checks run as nobody")
    except (ValueError, KeyError):
        pass
    write_student_tree(tmp_path / "s" / "eve", only=["1.1"])
    argv = ["exercise", "grade", str(tmp_path / "s"), "--out", str(tmp_path / "o"), "--course"]
    course = tmp_path / "c.json"
    course.write_text(json.dumps({"assignments": {"w": {"1.1": 1}}}))
    assert main(argv + [str(course)]) == 0
    err = capsys.readouterr().err
    assert "the checks run as root, so a region can read the instructor's tree" in err
    assert "check_user 'nobody' cannot read this Python" in err
    course.write_text(json.dumps({"assignments": {"w": {"1.1": 1}}, "check_user": ""}))
    assert main(argv + [str(course)]) == 0  # the grader's own user, as asked
    assert "the checks run as root" not in capsys.readouterr().err


@pytest.mark.parametrize("course_user", ["nobody", None], ids=["named", "by-default"])
def test_checks_run_as_the_check_user_cannot_read_or_write_the_graders_files(
    tmp_path, capsys, course_user
):
    """Where the grader runs as root and ``nobody`` can run its Python: the hidden checks'
    source in the instructor's tree cannot be read, nor the clean copy written; ``nobody``
    is also the checks' user when the course file names none."""
    from minidl_course.submission import can_run_checks_as

    try:
        can_run_checks_as("nobody")
    except (ValueError, KeyError) as exc:
        pytest.skip(str(exc))
    tree = tmp_path / "subs" / "mallory"
    write_student_tree(tree, only=["2.2"])
    hidden = os.path.join(repository_root(), "minidl", "exercises", "hidden", "layers.py")
    attack = f"""import minidl.exercises as grader
for path, mode in (({hidden!r}, "r"), (grader.__file__, "a")):
    try:
        open(path, mode).close()
        print("opened", path)
    except OSError as exc:
        print(type(exc).__name__, path)
return p * 0"""
    set_region(str(tree), LOSS, "2.2", attack)
    course = tmp_path / "course.json"
    user = {} if course_user is None else {"check_user": course_user}
    course.write_text(json.dumps({"assignments": {"w": {"2.2": 1}}, **user}))
    argv = ["exercise", "grade", str(tree), "--out", str(tmp_path / "out"), "--course"]
    assert main(argv + [str(course)]) == 0
    (visible,) = checks_named(json.loads((tmp_path / "out" / "results.json").read_text()), "2.2")
    assert "opened" not in visible["output"]
    assert visible["output"].count("PermissionError") == 2
