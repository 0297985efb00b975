"""``minidl exercise``: ``list``, ``check ID...`` or ``check --all``, ``student DIR [--only IDS]``.

The checks test the ``minidl`` package this command imported: in a student
tree, run ``python -m minidl exercise ...`` from the tree's folder (or
install the tree with ``pip install -e .``). The command warns when the
current folder holds another ``minidl`` than the one being checked.
"""

import contextlib
import dataclasses
import json
import os
import sys
import traceback

from ..exercises import catalogue, get, repository_root
from .common import number, option_adder

EXERCISE_HELP = {  # the help texts too long to share a line with their option
    "--markdown": "Markdown tables by chapter: what each file implements, its source",
    "--update": "with --markdown: rewrite the generated exercise list inside FILE",
    "--timeout": "seconds each check may take before it is reported as a hang (default: the "
    "exercise's own, 60 s for most)",
    "--only": "stub only these exercises (space or comma separated)",
    "--trace": "keep the solutions and record which regions each check runs (for testing the "
    "checks)",
    "--course": 'JSON: {"assignments": {"week-01": {"1.1": 4, ...}}, "hidden_visibility": '
    '"after_published"} (default: a chapter per assignment, 1 point per exercise)',
}


def add_exercise_arguments(parser):
    """The ``list``, ``check`` and ``student`` actions of ``minidl exercise``."""
    actions = parser.add_subparsers(dest="exercise_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the exercises: id, title, file")
    add = option_adder(listing, EXERCISE_HELP)
    add("--status", action="store_true", help="add whether each exercise's regions are still stubs")
    add("--markdown", action="store_true")
    add("--update", metavar="FILE")
    check = actions.add_parser("check", help="run exercise checks: expected vs got, and a hint")
    add = option_adder(check, EXERCISE_HELP)
    add("ids", nargs="*", metavar="ID", help="exercise ids, e.g. 3.1")
    add("--all", action="store_true", help="every exercise")
    add("--json", action="store_true", help="one JSON document on stdout")
    add("--timeout", type=number(positive=True), metavar="SECONDS")
    student = actions.add_parser("student", help="write a student tree: exercise regions stubbed")
    add = option_adder(student, EXERCISE_HELP)
    add("dir", help="the new folder")
    add("--only", nargs="+", metavar="IDS")
    add("--trace", action="store_true")
    grade = actions.add_parser(
        "grade",
        help="grade student submissions from this (the instructor's) tree: only their "
        "exercise regions count; visible and hidden checks, points, Gradescope and CSV",
    )
    add = option_adder(grade, EXERCISE_HELP)
    add("submissions", help="a folder of student trees (one sub-folder each), or one tree")
    add("--out", required=True, metavar="DIR", help="where results.json and the CSVs go")
    add("--course", metavar="FILE")


def _warn_other_tree():
    """Say so when the current folder holds a minidl package other than the one being checked."""
    here = os.path.realpath(os.path.join(os.getcwd(), "minidl", "__init__.py"))
    checked = os.path.realpath(repository_root())
    if os.path.exists(here) and os.path.dirname(os.path.dirname(here)) != checked:
        print(
            f"note: checking the minidl in {repository_root()}, not the one in this folder; "
            "run 'python -m minidl exercise ...' here to check this folder's code",
            file=sys.stderr,
        )


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
    from ..exercises import listing

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
    if args.status:
        _warn_other_tree()
    states = listing.region_states(repository_root(), exercises) if args.status else None
    print(listing.text_table(exercises, states))
    return 0


def _check(args):
    from ..exercises import grader

    if args.all == bool(args.ids):
        print("name exercise ids (minidl exercise check 3.1 3.2) or --all", file=sys.stderr)
        return 2
    exercises = _catalogue()
    try:
        exercises = exercises if args.all else [get(i) for i in args.ids]
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    if args.timeout is not None:
        exercises = [dataclasses.replace(e, timeout=args.timeout) for e in exercises]
    _warn_other_tree()
    if args.json:  # stdout holds the document alone: anything else printed goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            results = grader.grade(exercises)
        print(json.dumps(grader.report_json(results), indent=2))
    else:
        count = f"{len(exercises)} exercise(s)"
        print(f"checking {count} of the minidl in {repository_root()}", flush=True)
        results = grader.grade(
            exercises, on_result=lambda r: print(grader.format_result(r), flush=True)
        )
        print(grader.format_summary(results))
    return 0 if all(r.ok for r in results) else 1


def _student(args):
    from ..exercises.student import write_student_tree

    only = None if args.only is None else [i for item in args.only for i in item.split(",") if i]
    exercises = _catalogue()
    mode = "trace" if args.trace else "stub"
    regions = write_student_tree(args.dir, only=only, mode=mode, exercises=exercises)
    written = {r.exercise_id for r in regions}
    done = [e.id for e in exercises if e.id in written]
    what = "instrumented" if args.trace else "stubbed"
    ids = f" ({', '.join(done)})" if done else ""
    print(f"wrote {args.dir}: {len(regions)} region(s) of {len(done)} exercise(s) {what}{ids}")
    print(f"students run: cd {args.dir} && python -m minidl exercise list")
    return 0


def _grade(args):
    from ..exercises import submission

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
    try:
        actions = {"list": _list, "check": _check, "student": _student, "grade": _grade}
        return actions[args.exercise_action](args)
    except CannotLoad as exc:
        print(exc, file=sys.stderr)
        return 2
