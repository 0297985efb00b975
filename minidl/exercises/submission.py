"""Grade students' submissions from the instructor's tree: only their exercise regions count.

``grade_submission(student_root)`` copies the instructor's ``minidl/`` package
into a fresh folder and puts into it, region by region, the lines each
student wrote between ``# BEGIN EXERCISE x.y`` and ``# END EXERCISE x.y``
(matched by file, exercise and order). Nothing else of the submission is
read, so an edit to the checks, to the grader or to the tuned code cannot
change a grade. A region missing from the submission counts as not
written; one that does not compile raises a ``SyntaxError`` naming it.

The checks, the visible ones and the hidden ones of
``minidl/exercises/hidden/``, then run in a child process whose ``sys.path``
starts at the clean copy. The child appends each verdict to a report file
as soon as it has one, with what the code printed; a check without a
verdict when the child ends (the code ended the interpreter) is an
``error`` naming the exit status. The parent reads only that file, so no
output of the students' code reaches a JSON document.

Points come from a course file (JSON)::

    {"assignments": {"week-01": {"1.1": 4, "1.2": 3, "1.3": 3}},
     "hidden_visibility": "after_published"}

An exercise's points are shared equally by its checks (visible and hidden).
Without a course file each check chapter is an assignment and every
exercise is worth 1 point.
"""

import ast
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import catalogue, hidden_catalogue, repository_root
from .grader import LABELS, RankResult, Result, format_result
from .student import IGNORED, STUB_IMPORT, _import_index, find_regions, region_texts, stub_prefix

STARTUP_S = 30.0  # allowance for the child to import minidl and the checks
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")  # Gradescope's


def region_bodies(root):
    """``({(path, id, k): (indent, lines)}, problems)``: the lines of the k-th region of
    exercise ``id`` in ``path`` (counted in file order) of the tree at ``root``."""
    found, problems = region_texts(root)
    bodies, seen = {}, {}
    for r, lines in found:
        k = seen[(r.path, r.exercise_id)] = seen.get((r.path, r.exercise_id), -1) + 1
        bodies[(r.path, r.exercise_id, k)] = (r.indent, lines)
    return bodies, problems


def _reindent(lines, old, new):
    """``lines`` moved from indentation ``old`` to ``new`` (lines not under ``old`` kept)."""
    out = []
    for line in lines:
        body = line[len(old) :] if line.startswith(old) else line.lstrip(" \t")
        out.append(new + body if body.strip() else "\n")
    return [line if line.endswith("\n") else line + "\n" for line in out]


def _compiles(lines, indent):
    """None, or the ``SyntaxError`` of ``lines`` compiled as the body of a function."""
    body = "".join(_reindent(lines, indent, "    "))
    try:
        compile("def _region():\n" + body + "    pass\n", "<region>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc
    return None


def graft(student_root, out_dir, exercises, instructor_root=None):
    """Write the instructor's package with the student's regions to ``out_dir``; returns notes
    (``{exercise id: [text]}``) on regions that were missing or did not compile."""
    instructor_root = repository_root() if instructor_root is None else instructor_root
    shutil.copytree(
        os.path.join(instructor_root, "minidl"), os.path.join(out_dir, "minidl"), ignore=IGNORED
    )
    theirs, _ = region_bodies(student_root)
    titles = {e.id: e.title for e in exercises}
    regions, _ = find_regions(instructor_root)
    notes, by_file, seen = {}, {}, {}
    for r in regions:
        k = seen[(r.path, r.exercise_id)] = seen.get((r.path, r.exercise_id), -1) + 1
        by_file.setdefault(r.path, []).append((r, k))
    for path, file_regions in by_file.items():
        with open(os.path.join(instructor_root, path), encoding="utf-8") as source:
            text = source.read()
        lines = text.splitlines(keepends=True)
        for r, k in sorted(file_regions, key=lambda item: item[0].begin, reverse=True):
            stub = f"{r.indent}{stub_prefix(r.exercise_id)}, {json.dumps(titles[r.exercise_id])})\n"
            found = theirs.get((r.path, r.exercise_id, k))
            if found is None:
                notes.setdefault(r.exercise_id, []).append(
                    f"{r.path}: region {k + 1} of exercise {r.exercise_id} is not in the "
                    "submission (markers removed or file missing): graded as not written"
                )
                body = [stub]
            else:
                error = _compiles(found[1], found[0])
                body = _reindent(found[1], found[0], r.indent)
                if error is not None:
                    what = (
                        f"the submitted region {k + 1} of exercise {r.exercise_id} in {r.path} "
                        f"does not compile: line {error.lineno - 1} of the region: {error.msg}"
                    )
                    notes.setdefault(r.exercise_id, []).append(what)
                    body = [f"{r.indent}raise SyntaxError({json.dumps(what)})\n"]
                elif not any(line.strip() for line in body):
                    body = [stub]
            lines[r.begin : r.end - 1] = body
        lines.insert(_import_index(ast.parse(text)), STUB_IMPORT)
        with open(os.path.join(out_dir, path), "w", encoding="utf-8") as out:
            out.write("".join(lines))
    return notes


def _child_command(root, report, keys):
    bootstrap = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from minidl.exercises.submission import child_main; sys.exit(child_main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", bootstrap, report] + list(keys)


def child_main(argv):
    """In the child: run the checks named by their keys, appending each verdict to the report."""
    from . import get
    from .grader import grade

    report, keys = argv[0], argv[1:]
    catalogue()
    hidden_catalogue()

    def write(result):
        with open(report, "a", encoding="utf-8") as out:
            out.write(json.dumps(result.to_json()) + "\n")

    grade([get(key) for key in keys], on_result=write)
    return 0


def _from_json(item):
    item = {k: v for k, v in item.items() if k != "label"}
    ranks = item.pop("ranks")
    return Result(**item, ranks=None if ranks is None else [RankResult(**r) for r in ranks])


def _run_child(root, exercises):
    """``({key: Result}, exit status or None when stopped, output, budget)`` of one child."""
    budget = sum(e.timeout for e in exercises) + STARTUP_S * (
        1 + len({e.ranks for e in exercises if e.ranks})
    )
    env = dict(os.environ, PYTHONPATH=root, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="minidl-grade-") as folder:
        report = os.path.join(folder, "verdicts.jsonl")
        command = _child_command(root, report, [e.key for e in exercises])
        try:
            child = subprocess.run(
                command, cwd=root, env=env, capture_output=True, timeout=budget, check=False
            )
            status, output = child.returncode, child.stdout + child.stderr
        except subprocess.TimeoutExpired as stopped:
            status, output = None, (stopped.stdout or b"") + (stopped.stderr or b"")
        found = {}
        if os.path.exists(report):
            with open(report, encoding="utf-8") as lines:
                for line in lines:
                    result = _from_json(json.loads(line))
                    found[result.key] = result
    return found, status, output.decode("utf-8", "replace").strip(), budget


def run_isolated(root, exercises):
    """The ``Result`` of each check (``exercises``: visible or hidden) run in a child process
    that imports the tree at ``root``. When the child ends before every verdict, the first
    check without one is an error naming the exit status, and the rest run in a new child."""
    results, remaining = {}, list(exercises)
    while remaining:
        found, status, output, budget = _run_child(root, remaining)
        results.update(found)
        missing = [e for e in remaining if e.key not in found]
        if not missing:
            break
        first = missing[0]
        ended = (
            f"was stopped after {budget:g} s"
            if status is None
            else f"ended with status {status} (the code may have ended the interpreter)"
        )
        last = "\n    ".join(output.splitlines()[-15:]) or "(nothing)"
        results[first.key] = Result(
            first.id,
            first.title,
            first.path,
            "timed_out" if status is None else "error",
            f"the check ended without a verdict: the grading process {ended}; "
            f"its last output:\n    {last}",
            first.hint,
            test=first.test,
        )
        remaining = missing[1:]
    return [results[e.key] for e in exercises]


def read_course(path, exercises):
    """``({assignment: {id: points}}, hidden visibility)`` from a course file, or the default
    (one assignment per chapter, 1 point each); unknown ids and bad points are named."""
    known = {e.id: e for e in exercises}
    if path is None:
        chapters = {}
        for e in exercises:
            chapters.setdefault(f"{e.id.split('.')[0]}-{e.topic}", {})[e.id] = 1.0
        return chapters, "after_published"
    with open(path, encoding="utf-8") as source:
        try:
            document = json.load(source)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from exc
    assignments = document.get("assignments") if isinstance(document, dict) else None
    if not isinstance(assignments, dict) or not assignments:
        raise ValueError(
            f'{path}: write {{"assignments": {{"week-01": {{"1.1": 4, "1.2": 3}}}}}}'
            " (exercise ids and their points)"
        )
    problems = []
    for name, items in assignments.items():
        if not isinstance(items, dict):
            problems.append(f"assignment {name!r}: give {{id: points}}")
            continue
        for exercise_id, points in items.items():
            if exercise_id not in known:
                problems.append(f"assignment {name!r}: no exercise {exercise_id!r}")
            elif isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
                problems.append(f"assignment {name!r}: points of {exercise_id} must be >= 0")
    visibility = document.get("hidden_visibility", "after_published")
    if visibility not in VISIBILITIES:
        problems.append(f"hidden_visibility must be one of {', '.join(VISIBILITIES)}")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return {
        name: {i: float(p) for i, p in items.items()} for name, items in assignments.items()
    }, visibility


def checks_of(exercise_ids):
    """The visible check and the hidden checks of each exercise, in id order."""
    hidden = hidden_catalogue()
    visible = [e for e in catalogue() if e.id in exercise_ids]
    return visible + [h for h in hidden if h.id in exercise_ids]


def gradescope(results, points, visibility, notes=None, seconds=0.0):
    """Gradescope's ``results.json``: the score and one test per check, its output and
    visibility (hidden checks: ``visibility``); ``points``: {exercise id: points}."""
    notes = notes or {}
    counts = {}
    for r in results:
        counts[r.id] = counts.get(r.id, 0) + 1
    tests = []
    for r in results:
        worth = points[r.id] / counts[r.id]
        text = "\n".join(notes.get(r.id, []) + [format_result(r)])
        tests.append(
            {
                "name": f"{r.id} {r.title}" + (f" (hidden: {r.test})" if r.test else ""),
                "number": r.id,
                "score": worth if r.status == "passed" else 0.0,
                "max_score": worth,
                "status": "passed" if r.status == "passed" else "failed",
                "output": text,
                "visibility": "visible" if not r.test else visibility,
            }
        )
    return {
        "score": sum(t["score"] for t in tests),
        "execution_time": round(seconds, 3),
        "output": "minidl exercise grade: "
        + ", ".join(f"{LABELS[s].lower()} {n}" for s, n in _counts(results).items() if n),
        "visibility": "visible",
        "tests": tests,
    }


def _counts(results):
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


def grade_submission(student_root, points, visibility, instructor_root=None):
    """Gradescope's results document of one submission (``points``: {id: points})."""
    start = time.perf_counter()
    exercises = checks_of(set(points))
    with tempfile.TemporaryDirectory(prefix="minidl-clean-") as clean:
        notes = graft(student_root, clean, catalogue(), instructor_root)
        results = run_isolated(clean, exercises)
    return gradescope(results, points, visibility, notes, time.perf_counter() - start)


def is_submission(folder):
    return os.path.isdir(os.path.join(folder, "minidl"))


def submissions(folder):
    """``{name: path}``: ``folder`` itself when it holds ``minidl/`` (one submission, as
    Gradescope unpacks it), else each of its sub-folders that does."""
    if is_submission(folder):
        return {os.path.basename(os.path.abspath(folder)): folder}
    found = {
        name: os.path.join(folder, name)
        for name in sorted(os.listdir(folder))
        if is_submission(os.path.join(folder, name))
    }
    if not found:
        raise ValueError(
            f"{folder} holds no submission: give a folder of student trees (each with its "
            "minidl/ package), or one student tree"
        )
    return found


def exercise_scores(document):
    """``{exercise id: score}`` summed over an exercise's checks."""
    scores = {}
    for test in document["tests"]:
        scores[test["number"]] = scores.get(test["number"], 0.0) + test["score"]
    return scores


def write_grades(folder, out_dir, course_path=None, on_student=None):
    """Grade every submission in ``folder``; writes ``results.json`` per student and one CSV
    per assignment (a row per student, a column per exercise) into ``out_dir``; returns the
    documents by student."""
    assignments, visibility = read_course(course_path, catalogue())
    points = {i: p for items in assignments.values() for i, p in items.items()}
    found = submissions(folder)
    single = is_submission(folder)
    os.makedirs(out_dir, exist_ok=True)
    documents = {}
    for name, path in found.items():
        documents[name] = document = grade_submission(path, points, visibility)
        target = out_dir if single else os.path.join(out_dir, name)
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "results.json"), "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
        if on_student is not None:
            on_student(name, document)
    for assignment, items in assignments.items():
        with open(os.path.join(out_dir, f"{assignment}.csv"), "w", newline="") as out:
            table = csv.writer(out)
            table.writerow(["student"] + list(items) + ["total", "max"])
            for name, document in documents.items():
                scores = exercise_scores(document)
                row = [round(scores.get(i, 0.0), 6) for i in items]
                table.writerow([name] + row + [round(sum(row), 6), sum(items.values())])
    return documents
