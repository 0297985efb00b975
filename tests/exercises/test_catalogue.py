"""The course's guarantees, over the real catalogue (whatever exercises exist when this runs).

(a) The student tree with every region stubbed imports, and ``minidl exercise
    check --all`` run inside it reports every exercise as not implemented yet
    (none errors), each by the ``Unimplemented`` of its own id.
(b) The reference passes every exercise.
(c) Stubbing one exercise fails exactly its check: in the trace tree (the
    reference with each region recording that it ran) every check runs all
    regions of its own exercise and no region of another. A stub only changes
    the code of its own regions, so stubbing X can change check X alone; and
    by (a) it does change it.

The catalogue runs three times: in this process (b), and in the two trees
(as a student runs it: ``python -m minidl`` from the tree's folder). MPI
checks run under mpiexec, one job per size, and are skipped without MPI.
With no exercise registered the tests pass and warn that they proved nothing.
"""

import json
import os
import re
import subprocess
import sys
import warnings

import pytest

from minidl.exercises import catalogue, grader, repository_root
from minidl.exercises.trace import ENV, read_trace
from minidl_course.student import find_regions, write_student_tree

EXERCISES = catalogue()
RUN_TIMEOUT = min(580, 120 + sum(e.timeout for e in EXERCISES))


def nothing_to_prove():
    """True (with a warning) when no exercise is registered yet."""
    if not EXERCISES:
        warnings.warn(
            "no exercises are registered yet: the exercise-mode guarantees hold "
            "vacuously (add checks in minidl/exercises/checks/)",
            stacklevel=2,
        )
    return not EXERCISES


def in_tree(tree, *args, env=None):
    """Run ``python *args`` in ``tree`` with only the tree's minidl importable."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1", **(env or {})},
    )


def check_all(tree, env=None):
    """``python -m minidl exercise check --all --json`` in ``tree``: ``{id: result}``."""
    run = in_tree(tree, "-m", "minidl", "exercise", "check", "--all", "--json", env=env)
    assert run.stdout, run.stderr[-3000:]
    document = json.loads(run.stdout)
    assert os.path.samefile(document["root"], tree), "the checks ran another tree's code"
    return {r["id"]: r for r in document["results"]}, run.returncode


@pytest.fixture(scope="module")
def stubbed_tree(tmp_path_factory):
    tree = tmp_path_factory.mktemp("student")
    write_student_tree(tree / "tree")
    return tree / "tree"


@pytest.fixture(scope="module")
def stubbed_results(stubbed_tree):
    return check_all(stubbed_tree)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The trace tree's results and ``{check: {(region id, where)}}``."""
    tree = tmp_path_factory.mktemp("trace")
    write_student_tree(tree / "tree", mode="trace")
    log = tree / "regions.tsv"
    results, _ = check_all(tree / "tree", env={ENV: str(log)})
    return results, read_trace(log)


def ran(results, exercise):
    return results[exercise.id]["status"] != "skipped"


def test_the_stubbed_tree_imports_every_reference_module(stubbed_tree):
    script = (
        "import importlib, pkgutil, minidl, minidl.reference; "
        "[importlib.import_module(m.name) for m in "
        "pkgutil.walk_packages(minidl.reference.__path__, 'minidl.reference.')]; "
        "import minidl.exercises; minidl.exercises.catalogue(); print(minidl.__file__)"
    )
    run = in_tree(stubbed_tree, "-c", script)
    assert run.returncode == 0, run.stderr[-3000:]
    assert os.path.samefile(run.stdout.strip(), stubbed_tree / "minidl" / "__init__.py")


def test_every_exercise_is_not_implemented_in_the_stubbed_tree(stubbed_results):
    results, status = stubbed_results
    if nothing_to_prove():
        assert status == 0
        return
    assert status == 1
    wrong = {
        i: f"{r['status']}: {r['message']}"
        for i, r in results.items()
        if r["status"] not in ("unimplemented", "skipped")
    }
    assert not wrong, (
        f"checks that are not 'not implemented yet' with every region stubbed: {wrong}"
    )
    for e in EXERCISES:  # an MPI check's verdict may come from one rank: "rank 2: exercise ..."
        if ran(results, e):
            assert re.match(
                rf"(rank \d+: )?exercise {re.escape(e.id)} \(", results[e.id]["message"]
            ), results[e.id]


def test_the_reference_passes_every_exercise():
    if nothing_to_prove():
        return
    results = grader.grade(EXERCISES)
    failed = [grader.format_result(r) for r in results if not r.ok]
    assert not failed, "\n".join(failed)


def test_each_check_runs_its_own_regions_and_no_other(traced):
    results, regions_run = traced
    if nothing_to_prove():
        return
    failed = [
        f"{i}: {r['status']}: {r['message']}"
        for i, r in results.items()
        if r["status"] not in ("passed", "skipped")
    ]
    assert not failed, "the trace tree must pass like the reference:\n" + "\n".join(failed)
    regions, _ = find_regions(repository_root())
    problems = []
    for e in EXERCISES:
        if not ran(results, e):
            continue
        seen = regions_run.get(e.id, set())
        others = sorted({region for region, _ in seen if region != e.id})
        if others:
            problems.append(
                f"check {e.id} runs the region(s) of exercise(s) {', '.join(others)}: "
                "its oracle must not depend on another exercise"
            )
        missing = sorted(
            r.where for r in regions if r.exercise_id == e.id and (e.id, r.where) not in seen
        )
        if missing:
            problems.append(f"check {e.id} never runs its region(s) at {', '.join(missing)}")
    assert not problems, "\n".join(problems)
