"""Where a student tree still shows the solution of an exercise: a search for its lines.

A solution line is a statement of an exercise region (comments and spaces
dropped) of at least ``MIN_CHARS`` characters that the instructor's
``minidl/reference/`` and ``minidl/exercises/`` do not also hold outside the
regions (a helper call the given code makes too is no secret). The search
reads every ``.py``, ``.md`` and ``.ipynb`` file of a student tree, outside hidden
folders (``.venv``, ``.git``: a virtual environment's packages are not the tree's code).

The tuned library implements some exercises in the same form: those places
stay visible on purpose (the examples and training need them) and are listed
in ``VISIBLE_IN_TUNED_CODE`` and in the instructor's guide; every other hit
is a leak.
"""

import os
import re

from .student import IGNORED, region_texts

MIN_CHARS = 30
SEARCHED = (".py", ".md", ".ipynb")
GIVEN = ("minidl/reference/", "minidl/exercises/")  # given code: its lines are no secret
VISIBLE_IN_TUNED_CODE = {
    "3.3": ("minidl/conv/direct.py",),  # the tuned direct convolution: the same loop over taps
    "10.2": ("minidl/dist/pipeline/schedules.py",),  # the tuned 1F1B schedule's phases
    "13.1": ("minidl/data/colour.py",),  # the tuned colour PCA: the same eigh, sorted
}


def normalise(line):
    """A line without its comment and its spaces (strings keep their ``#``)."""
    code = re.sub(r"#(?=[^\"']*$).*", "", line)
    return re.sub(r"\s+", "", code)


def _python_files(root, under):
    for folder, dirs, files in os.walk(os.path.join(root, under)):
        skip = IGNORED(folder, dirs)
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(SEARCHED):
                yield os.path.join(folder, name)


def solution_lines(root, ids=None):
    """``{normalised line: exercise id}`` of the regions of ``ids`` (default: all) in the tree
    at ``root`` (the instructor's)."""
    found, _ = region_texts(root)
    inside = {}
    for r, lines in found:
        for line in lines:
            inside.setdefault(normalise(line), r.exercise_id)
    given = set()
    for under in GIVEN:
        for full in _python_files(root, under):
            path = os.path.relpath(full, root).replace(os.sep, "/")
            marked = {
                r.begin + i for r, _ in found if r.path == path for i in range(r.end - r.begin)
            }
            with open(full, encoding="utf-8") as source:
                given |= {normalise(t) for n, t in enumerate(source, 1) if n not in marked}
    return {
        line: exercise_id
        for line, exercise_id in inside.items()
        if len(line) >= MIN_CHARS and line not in given and (ids is None or exercise_id in ids)
    }


def find_solutions(tree, solutions):
    """``[(path, line number, exercise id)]`` of every line of the tree that is a solution line."""
    found = []
    for full in _python_files(tree, ""):
        with open(full, encoding="utf-8", errors="replace") as source:
            for number, line in enumerate(source, 1):
                exercise_id = solutions.get(normalise(line))
                if exercise_id is not None:
                    found.append((os.path.relpath(full, tree), number, exercise_id))
    return found


def leaks(tree, root=None, ids=None):
    """The hits of ``find_solutions`` outside ``VISIBLE_IN_TUNED_CODE``."""
    from minidl.exercises import repository_root

    solutions = solution_lines(repository_root() if root is None else root, ids)
    return [
        (path, number, exercise_id)
        for path, number, exercise_id in find_solutions(tree, solutions)
        if path.replace(os.sep, "/") not in VISIBLE_IN_TUNED_CODE.get(exercise_id, ())
    ]
