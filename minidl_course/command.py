"""``minidl exercise``: ``list``, ``check``, ``status``, ``student``, ``release``, ``grade``
(the course tooling's command; ``minidl_app.cli`` runs it).

``list``, ``check`` and ``status`` test the tree of the current folder: run
inside a student tree (or a folder below it) by an installed ``minidl``
command, they rerun themselves with that tree's package first on the path.
``grade`` runs in the instructor's tree and reads only the students'
exercise regions (``minidl_course.submission``).
"""

import argparse
import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import traceback

from minidl.exercises import catalogue, get, hidden_catalogue, repository_root

COURSE_HELP = (
    'JSON: {"assignments": {"week-01": {"1.1": 4, ...}}, "hidden_visibility": '
    '"after_published"} (default: a chapter per assignment, 1 point per exercise)'
)


def seconds(text):
    """An argparse type: a finite number of seconds > 0, or a usage error that says so."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value


def add_exercise_arguments(parser):
    """The ``list``, ``check`` and ``student`` actions of ``minidl exercise``."""
    actions = parser.add_subparsers(dest="exercise_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the exercises: id, title, file")
    add = listing.add_argument
    add("--status", action="store_true", help="add whether each exercise's regions are still stubs")
    add(
        "--markdown",
        action="store_true",
        help="Markdown tables by chapter: what each file implements, its source",
    )
    add(
        "--update",
        metavar="FILE",
        help="with --markdown: rewrite the generated exercise list inside FILE",
    )
    check = actions.add_parser("check", help="run exercise checks: expected vs got, and a hint")
    add = check.add_argument
    add("ids", nargs="*", metavar="ID", help="exercise ids, e.g. 3.1")
    add("--all", action="store_true", help="every exercise (in a student tree: handed out)")
    add("--json", action="store_true", help="one JSON document on stdout")
    add(
        "--hidden",
        action="store_true",
        help="also run the exercises' hidden checks (the instructor's tree has them, a "
        "student tree does not)",
    )
    add(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="seconds each check may take before it is reported as a hang (default: the "
        "exercise's own, 60 s for most)",
    )
    student = actions.add_parser("student", help="write a student tree: exercise regions stubbed")
    add = student.add_argument
    add("dir", help="the new folder")
    add(
        "--only",
        nargs="+",
        metavar="IDS",
        help="release only these exercises (space or comma separated); the regions of the "
        "others hold a not-released stub, not their solutions",
    )
    add(
        "--trace",
        action="store_true",
        help="keep the solutions and record which regions each check runs (for testing the checks)",
    )
    status = actions.add_parser(
        "status", help="each exercise: passes, fails, not started (or not released), points"
    )
    status.add_argument("--course", metavar="FILE", help=COURSE_HELP)
    release = actions.add_parser(
        "release", help="hand out more exercises in a student tree, keeping the student's work"
    )
    release.add_argument("dir", help="the student tree")
    release.add_argument(
        "ids", nargs="+", metavar="ID", help="exercise ids (space or comma separated)"
    )
    grade = actions.add_parser(
        "grade",
        help="grade student submissions from this (the instructor's) tree: only their "
        "exercise regions count; visible and hidden checks, points, Gradescope and CSV",
    )
    add = grade.add_argument
    add("submissions", help="a folder of student trees (one sub-folder each), or one tree")
    add("--out", required=True, metavar="DIR", help="where results.json and the CSVs go")
    add("--course", metavar="FILE", help=COURSE_HELP)


RERUN = "MINIDL_EXERCISE_TREE"  # set in a command rerun with the tree of the current folder


def _tree_here():
    """The nearest folder at or above the current one that holds a minidl package with
    exercises (a student tree, or a checkout), or None."""
    folder = os.getcwd()
    while True:
        if os.path.isfile(os.path.join(folder, "minidl", "exercises", "__init__.py")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _rerun_in_tree_here(args):
    """None when the minidl imported is the tree of the current folder; else the exit status
    of this command rerun with that tree's minidl first on the path (so that ``minidl
    exercise check`` in a student tree checks the student's code, not an installed copy)."""
    here = _tree_here()
    if here is None or os.environ.get(RERUN):
        return None
    if os.path.realpath(here) == os.path.realpath(repository_root()):
        return None
    print(f"note: checking the minidl in {here} (this folder's tree)", file=sys.stderr)
    path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, **{RERUN: here})
    command = [sys.executable, "-m", "minidl", "exercise", *args.argv]
    return subprocess.run(command, env=env, check=False).returncode


class CannotLoad(Exception):
    """The check modules (or the code they import) do not import: a message for the student."""


def _catalogue():
    """The exercises; code that does not import becomes one clear ``CannotLoad`` naming its line."""
    try:
        return catalogue()
    except SyntaxError as exc:
        raise CannotLoad(
            f"cannot load the exercises: {exc.filename}, line {exc.lineno}: "
            f"{exc.msg}; fix that line and run the command again"
        ) from exc
    except Exception as exc:  # noqa: BLE001 -- any error while a module runs on import
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CannotLoad(
            f"cannot load the exercises: {type(exc).__name__}: {exc} "
            f"({frame.filename}, line {frame.lineno}); fix it and run the command again"
        ) from exc


def _list(args):
    from . import listing

    exercises = _catalogue()
    if args.markdown:
        text = listing.markdown_list(exercises, repository_root())
        if args.update:
            with open(args.update, encoding="utf-8") as source:
                updated = listing.update_block(source.read(), text)
            with open(args.update, "w", encoding="utf-8") as out:
                out.write(updated)
            print(f"updated the exercise list in {args.update} ({len(exercises)} exercises)")
        else:
            print(text)
        return 0
    if args.update:
        print("--update needs --markdown", file=sys.stderr)
        return 2
    if not exercises:
        print("no exercises are registered yet (minidl/exercises/checks/)")
        return 0
    states = listing.region_states(repository_root(), exercises) if args.status else None
    print(listing.text_table(exercises, {"state": states} if states else None))
    return 0


def _status(args):
    from . import grader, listing
    from .student import released
    from .submission import read_course

    exercises = _catalogue()
    states = listing.region_states(repository_root(), exercises)
    assignments = read_course(args.course, exercises).assignments
    handed_out = released(repository_root())
    points = {
        i: p
        for items in assignments.values()
        for i, p in items.items()
        if handed_out is None or i in handed_out
    }
    print(f"checking the written exercises of the minidl in {repository_root()}", flush=True)
    written = [e for e in exercises if states[e.id] == "written"]
    results = {r.id: r for r in grader.grade(written)}
    shown, scored = listing.progress(states, results, points)
    weeks, later = listing.released_weeks(assignments, handed_out)
    in_weeks = {i for name in weeks for i in assignments[name]}
    rows = [e for e in exercises if e.id in in_weeks or states[e.id] != "not released"]
    print(listing.text_table(rows, {"state": shown, "points": scored}))
    for name in weeks:
        got = sum(float(scored[i].split("/")[0]) for i in assignments[name])
        worth = sum(p for i, p in points.items() if i in assignments[name])
        print(f"{name}: {got:g} of {worth:g} points")
    if later:
        print(f"not released yet: {', '.join(later)}")
    got = sum(float(s.split("/")[0]) for s in scored.values())
    print(
        f"{got:g} of {sum(points.values()):g} points from the visible checks "
        "(the grade also runs checks you do not see)"
    )
    return 0 if all(r.ok for r in results.values()) else 1


def _check(args):
    from . import grader

    if args.all == bool(args.ids):
        print("name exercise ids (minidl exercise check 3.1 3.2) or --all", file=sys.stderr)
        return 2
    if not args.json:
        return _run_checks(args, lambda r: print(grader.format_result(r), flush=True))[0]
    # stdout holds the JSON document alone: what the code prints, on import too, goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        status, results = _run_checks(args, None)
    if results is not None:
        print(json.dumps(grader.report_json(results), indent=2))
    return status


def _run_checks(args, on_result):
    """``(exit status, results)`` of the chosen checks (results None for an unknown id);
    with ``on_result`` (not --json) a header, each verdict as it comes, and a summary."""
    from . import grader
    from .student import released

    exercises, handed_out = _catalogue(), released(repository_root())
    if args.all and handed_out is not None:  # a student tree: the exercises handed out
        exercises = [e for e in exercises if e.id in handed_out]
    try:
        exercises = exercises if args.all else [get(i) for i in args.ids]
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2, None
    if args.hidden:
        chosen = {e.id for e in exercises}
        exercises += [h for h in hidden_catalogue() if h.id in chosen]
    if args.timeout is not None:
        exercises = [dataclasses.replace(e, timeout=args.timeout) for e in exercises]
    if on_result is not None:
        count = f"{len(exercises)} exercise(s)"
        print(f"checking {count} of the minidl in {repository_root()}", flush=True)
    results = grader.grade(exercises, on_result=on_result)
    if on_result is not None:
        print(grader.format_summary(results))
    return (0 if all(r.ok for r in results) else 1), results


def _ids(items):
    return None if items is None else [i for item in items for i in item.split(",") if i]


def _student(args):
    from .student import write_student_tree

    exercises = _catalogue()
    mode = "trace" if args.trace else "stub"
    only = _ids(args.only)
    regions = write_student_tree(args.dir, only=only, mode=mode, exercises=exercises)
    chosen = [e.id for e in exercises if only is None or e.id in only]
    what = "instrumented" if args.trace else "stubbed"
    print(
        f"wrote {args.dir}: {len(regions)} region(s) {what}; exercises handed out: "
        f"{', '.join(chosen) or 'none'}"
    )
    print(f"students run: cd {args.dir} && python -m minidl exercise list")
    return 0


def _release(args):
    from .student import release

    new = release(args.dir, _ids(args.ids), _catalogue())
    if new:
        print(f"released {', '.join(new)} in {args.dir}; the student's code is unchanged")
    else:
        print(f"nothing new: {', '.join(_ids(args.ids))} were already released in {args.dir}")
    return 0


def _grade(args):
    from . import submission

    _catalogue()
    try:
        found = submission.submissions(args.submissions)
    except (ValueError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"grading {len(found)} submission(s) with the checks of {repository_root()}", flush=True)

    def show(name, document):
        total = sum(t["max_score"] for t in document["tests"])
        print(f"{name}: {document['score']:g} / {total:g}", flush=True)

    try:
        submission.write_grades(args.submissions, args.out, args.course, on_student=show)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {args.out}: results.json per submission, a CSV per assignment")
    return 0


def run_exercise(args):
    """Run the chosen action; the exit status is non-zero when a check does not pass."""
    if args.exercise_action in ("list", "check", "status"):
        status = _rerun_in_tree_here(args)
        if status is not None:
            return status
    try:
        actions = {
            "list": _list,
            "check": _check,
            "student": _student,
            "release": _release,
            "status": _status,
            "grade": _grade,
        }
        return actions[args.exercise_action](args)
    except CannotLoad as exc:
        print(exc, file=sys.stderr)
        return 2
