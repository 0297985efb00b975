"""Grade students' submissions from the instructor's tree: only their exercise regions count,
and nothing a check's code does moves the verdict of another check.

Before any student code runs, the grader (this process) reads the instructor's
``minidl/`` and ``minidl_course/`` packages and every submission's regions into memory.
For each submission it writes a *clean copy*: the instructor's packages with, region by
region, the lines the student wrote between ``# BEGIN EXERCISE x.y`` and
``# END EXERCISE x.y`` (matched by file, exercise and order). Nothing else of
the submission is read, so an edit to the checks, to the grader or to the
tuned code cannot change a grade. A region missing from the submission counts
as not written; one that does not compile raises a ``SyntaxError`` naming it
(the other regions of its file still count). The hidden checks of
``minidl/exercises/hidden/`` reach the clean copy as bytecode only: their
source is not in it.

The checks then run in a *grading process* that imports the clean copy and
runs no student code itself: it forks one process per check (an MPI check
starts its ``mpiexec`` job from there), so what the checked code changes in
memory ends with its check. After each check the grading process puts back
every file of the clean copy that differs from the bytes recorded before
any student code ran, and removes any file added. Each check's process sends
one verdict, what the code printed capped, through a pipe that only it holds;
a process that ends without one (the code ended the interpreter) is an
``error`` naming its exit status. Neither the grader nor the grading process
can be traced by the checks' processes unless these run as root. With
``check_user`` in the course file and the grader run as root, the checks run
as that user, who can write none of these files and cannot read the
instructor's package (readable by root only while grading): its solutions and
the hidden checks' source. Without it a grader run as root picks ``nobody`` where
that user can run this Python, and otherwise says what the checks can reach
(``automatic_check_user``); ``"check_user": ""`` keeps the grader's own user.

A verdict is reached in the process that runs the student's code, so a pass must bring
its evidence: the values the code gave to each of the check's comparisons, which the
grader judges against the same checks run once on the instructor's own tree
(``reference_evidence``, kept in a cache; ``minidl_course.evidence``). A check's process
may send verdicts for its own checks only.

The course file's ``time_limit`` (600 s by default, the autograder's usual
limit) bounds the grading of one submission: each check gets its own timeout
while the checks left fit, and shares what is left in proportion to it when
they do not; a check with too little left is reported as not run, and the
grader stops the grading process in time to write ``results.json``.

Points come from a course file (JSON)::

    {"assignments": {"week-01": {"1.1": 4, "1.2": 3, "1.3": 3}},
     "hidden_visibility": "after_published", "time_limit": 600, "check_user": "nobody"}

An exercise's points are shared equally by its checks (visible and hidden).
Without a course file each check chapter is an assignment and every
exercise is worth 1 point.
"""

# everything the grading process and the checks' processes use is imported here, before any
# student code runs: none of it is read from disk after a check could have changed it
import ast
import contextlib
import csv
import ctypes
import dataclasses
import hashlib
import importlib.util
import inspect
import json
import marshal
import os
import platform
import pwd
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy

from minidl.exercises import catalogue, get, hidden_catalogue, repository_root

from .evidence import judged
from .grader import (
    EXIT,
    LABELS,
    MPI_STARTUP_S,
    OUTPUT_KEPT,
    RankResult,
    Result,
    clip_line,
    clip_text,
    format_result,
    grade,
    verdict_of,
)
from .student import IGNORED, STUB_IMPORT, _import_index, region_texts, scan_file, stub_prefix

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")  # Gradescope's
TIME_LIMIT_S = 600.0  # the autograder's usual limit for one submission (the course file's default)
MIN_CHECK_S = 1.0  # a check that would get less than this is not run
START_S = 0.2  # what starting one check's process costs, counted when sharing the time left
MPI_START_S = 3.0  # ... and one MPI job
GRACE_S = 3.0  # after a check's timeout (its process reports it first), before it is killed
VERDICT_BYTES = 64 << 20  # the most of a check process's verdicts, with their evidence, read
HIDDEN_PREFIX = "minidl/exercises/hidden/"
# the clean copy: the library with the student's regions, and the course tooling that grades
# it (its processes import both from the copy, which is put back after every check)
GRADED = ("minidl", "minidl_course")
LOG_LINES = 15  # lines shown of what a process printed before it ended without a verdict


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


def package_files(root):
    """``{path: bytes}`` of every file of the ``GRADED`` packages in ``root`` (paths relative
    to ``root``, with ``/``; caches left out)."""
    files = {}
    for folder, dirs, names in (w for name in GRADED for w in os.walk(os.path.join(root, name))):
        skipped = IGNORED(folder, dirs + names)
        dirs[:] = sorted(d for d in dirs if d not in skipped)
        for name in sorted(n for n in names if n not in skipped):
            full = os.path.join(folder, name)
            with open(full, "rb") as source:
                files[os.path.relpath(full, root).replace(os.sep, "/")] = source.read()
    return files


def bytecode(path, source):
    """The contents of the ``.pyc`` file that stands for the module at ``path`` without its
    source (Python imports a ``name.pyc`` found where ``name.py`` would be)."""
    code = compile(source, path, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)


def _grafted(text, path, theirs, titles, notes):
    """The instructor's file ``text`` with the student's regions (``theirs``, as from
    ``region_bodies``) in place of its own; problems are added to ``notes``."""
    regions, _ = scan_file(text, path)
    if not regions:
        return text
    lines = text.splitlines(keepends=True)
    numbered, seen = [], {}
    for r in regions:
        k = seen[r.exercise_id] = seen.get(r.exercise_id, -1) + 1
        numbered.append((r, k))
    for r, k in reversed(numbered):
        stub = f"{r.indent}{stub_prefix(r.exercise_id)}, {json.dumps(titles[r.exercise_id])})\n"
        found = theirs.get((path, r.exercise_id, k))
        if found is None:
            notes.setdefault(r.exercise_id, []).append(
                f"{path}: region {k + 1} of exercise {r.exercise_id} is not in the "
                "submission (markers removed or file missing): graded as not written"
            )
            body = [stub]
        else:
            error = _compiles(found[1], found[0])
            body = _reindent(found[1], found[0], r.indent)
            if error is not None:
                what = (
                    f"the submitted region {k + 1} of exercise {r.exercise_id} in {path} "
                    f"does not compile: line {error.lineno - 1} of the region: {error.msg}"
                )
                notes.setdefault(r.exercise_id, []).append(what)
                body = [f"{r.indent}raise SyntaxError({json.dumps(what)})\n"]
            elif not any(line.strip() for line in body):
                body = [stub]
        lines[r.begin : r.end - 1] = body
    lines.insert(_import_index(ast.parse(text)), STUB_IMPORT)
    return "".join(lines)


def clean_files(package, theirs, exercises):
    """``(files, notes)``: the clean copy of ``package`` (from ``package_files``) with the
    student's regions ``theirs`` (from ``region_bodies``) and the hidden checks as bytecode,
    and ``{exercise id: [text]}`` on regions that were missing or did not compile."""
    titles = {e.id: e.title for e in exercises}
    files, notes = {}, {}
    for path, data in package.items():
        if path.startswith(HIDDEN_PREFIX) and path.endswith(".py"):
            files[path + "c"] = bytecode(path, data)
        elif path.endswith(".py") and b"EXERCISE" in data.upper():
            files[path] = _grafted(data.decode("utf-8"), path, theirs, titles, notes).encode()
        else:
            files[path] = data
    return files, notes


def restore(root, files):
    """Make the ``GRADED`` packages in ``root`` hold exactly ``files`` (``{path: bytes}``):
    rewrite every file that differs, remove everything else; returns the paths changed."""
    try:
        return _restore(root, files)
    except OSError:  # the code took its folders' permissions away: write the copy anew
        _make_removable(root)
        for name in GRADED:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        _restore(root, files)
        return list(GRADED)


def _make_removable(folder):
    """Give this user back every right on ``folder`` and the folders below it."""
    os.chmod(folder, 0o755)
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            _make_removable(entry.path)


def _restore(root, files):
    changed = []
    for folder, dirs, names in (w for name in GRADED for w in os.walk(os.path.join(root, name))):
        for name in dirs + names:
            full = os.path.join(folder, name)
            path = os.path.relpath(full, root).replace(os.sep, "/")
            wanted = path in files if name in names else _holds(path, files)
            if wanted and not os.path.islink(full):
                continue
            changed.append(path)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
        dirs[:] = [d for d in dirs if os.path.isdir(os.path.join(folder, d))]
    for path, data in files.items():
        full = os.path.join(root, path)
        try:
            with open(full, "rb") as source:
                if source.read() == data:
                    continue
        except OSError:
            pass
        if path not in changed:
            changed.append(path)
        os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
        if os.path.lexists(full):
            os.unlink(full)
        with open(os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as out:
            out.write(data)
    return changed


def _holds(folder, files):
    """Whether ``folder`` (relative to the root) holds one of ``files``."""
    return any(p.startswith(folder + "/") for p in files)


def graft(student_root, out_dir, exercises, instructor_root=None):
    """Write the clean copy of the instructor's package with the student's regions to
    ``out_dir``; returns notes (``{exercise id: [text]}``) on regions that were missing or did
    not compile."""
    package = package_files(repository_root() if instructor_root is None else instructor_root)
    files, notes = clean_files(package, region_bodies(student_root)[0], exercises)
    restore(out_dir, files)
    return notes


# ---- the grading process (imports the clean copy, runs no student code) and each check's ----


def traceable(on):
    """Let processes of the same user trace this one and read its memory (``on``), or not
    (Linux; elsewhere nothing changes)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(4, int(on), 0, 0, 0)  # PR_SET_DUMPABLE


@contextlib.contextmanager
def not_traceable():
    """While inside, the checks' processes cannot trace this one (the grader)."""
    traceable(False)
    try:
        yield
    finally:
        traceable(True)


def _check_user(name):
    """``(uid, gid)`` of the user the checks run as, or None to keep this process's user."""
    if not name:
        return None
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def _become(user):
    """In a check's process: run as ``user`` (``(uid, gid)`` or None), write no file over
    64 MB (a write past it fails), dump no core, and be traceable again as any process."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if user is not None:
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])
        os.environ["HOME"] = tempfile.gettempdir()
    traceable(True)  # this process only: the grading process it was forked from stays closed


def _trusted(module):
    """Whether the verdicts rely on ``module``: the builtins, NumPy, the checks and the course
    tooling."""
    return (
        module in ("builtins", "numpy")
        or module.split(".")[0] == "minidl_course"
        or module.split(".")[:2] == ["minidl", "exercises"]
    )


def _identity(value):
    """What changes when ``value`` is replaced, or its code or defaults are: the identities of
    the value and, for a function, of its code and defaults; for a class, those of the
    functions and classes it defines."""
    if isinstance(value, type):
        members = [v for v in list(vars(value).values()) if callable(v)]
        return (id(value),) + tuple(_identity(v) for v in members)
    parts = ("__code__", "__defaults__", "__kwdefaults__")
    return (id(value),) + tuple(id(getattr(value, part, None)) for part in parts)


def grader_state():
    """``{(module, name): identity}`` of the code the verdicts rely on in memory: the functions,
    classes and modules named by the builtins, NumPy and the grader's and the checks' modules
    (not their data, which the grader itself changes)."""
    return {
        (module, name): _identity(value)
        for module in [m for m in list(sys.modules) if _trusted(m)]
        for name, value in list(vars(sys.modules[module]).items())
        if callable(value) or inspect.ismodule(value)
    }


def _check_process(checks, verdict, log, user):
    """The body of a check's process: its output into ``log``, the verdicts of ``checks`` into
    the pipe ``verdict`` (a JSON list); never returns."""
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        _become(user)
        before = grader_state()
        results = grade(checks, evidence=True)
        after = grader_state()
        moved = [f"{m}.{n}" for (m, n), was in before.items() if after.get((m, n)) != was]
        for result in results if moved else []:
            result.status = "error"
            result.message = (
                f"the code changed the grader in memory ({', '.join(moved[:5])}"
                + (", ..." if len(moved) > 5 else "")
                + "): no verdict of this check can be trusted"
            )
        for result in results:
            result.message = clip_text(result.message, OUTPUT_KEPT)
            for rank in result.ranks or []:
                rank.message = clip_text(rank.message, OUTPUT_KEPT)
        with os.fdopen(verdict, "wb") as out:
            out.write(json.dumps([r.to_json() for r in results]).encode())
    except BaseException:  # noqa: BLE001 -- the grader's own failure, shown as the output
        traceback.print_exc()
        EXIT(1)
    EXIT(0)


def _read_until(fd, limit, most):
    """``(bytes, ended)`` read from ``fd`` until its end (``ended``), the time ``limit`` or
    ``most`` bytes."""
    parts, size = [], 0
    while size < most:
        left = limit - time.time()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b"".join(parts), False
        chunk = os.read(fd, min(most - size, 1 << 20))
        if not chunk:
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False


def _wait(pid, limit):
    """The exit status of process ``pid`` (negative: the signal), killed at ``limit``."""
    while time.time() < limit:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _tail(log):
    """The last lines written to the open file ``log``, indented, or "(nothing)"."""
    log.seek(max(0, os.fstat(log.fileno()).st_size - OUTPUT_KEPT))
    text = log.read().decode("utf-8", "replace").strip()
    return "\n    ".join(text.splitlines()[-LOG_LINES:]) or "(nothing)"


def _without_verdict(exercise, status, output, process="its process"):
    """The ``error`` of a check whose ``process`` ended (``status``) without a verdict."""
    return verdict_of(
        exercise,
        "error",
        f"the check ended without a verdict: {process} ended with status {status} (the code "
        f"may have ended the interpreter); its last output:\n    {output}",
    )


def units(checks):
    """``checks`` in the groups that share a process: an in-process check alone, the MPI checks
    of one exercise on one number of ranks together (one job: they run the same regions, so
    sharing it gives that code no reach it lacks), in the order of each group's first."""
    groups = {}
    for e in checks:
        groups.setdefault((e.id, e.ranks) if e.ranks else e.key, []).append(e)
    return list(groups.values())


def run_forked(checks, deadline, user, report):
    """The ``Result`` of each of ``checks`` (one unit) run in a process forked from this one
    (closed in it: ``report``, this process's own pipe), killed a little after its timeouts."""
    read, write = os.pipe()
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.close(report)
            _check_process(checks, write, log.fileno(), user)
        os.close(write)
        allowance = sum(e.timeout for e in checks) + GRACE_S
        limit = min(time.time() + allowance + (MPI_STARTUP_S if checks[0].ranks else 0), deadline)
        data, _ = _read_until(read, limit, VERDICT_BYTES * len(checks))
        os.close(read)
        status = _wait(pid, limit)
        try:
            results = [_from_json(item) for item in json.loads(data)]
            if [r.key for r in results] == [e.key for e in checks]:  # its own checks' only
                return results
        except (ValueError, TypeError, KeyError):
            pass
        if time.time() >= limit:
            return [
                verdict_of(
                    e,
                    "timed_out",
                    f"no answer after {e.timeout:g} s: its process was stopped; its last "
                    f"output:\n    {_tail(log)}",
                )
                for e in checks
            ]
        return [_without_verdict(e, status, _tail(log)) for e in checks]


def time_scale(checks, deadline):
    """By how much the timeouts of ``checks`` (those left) shrink so that they end before
    ``deadline`` (a ``time.time()``): 1 while they fit, else their share of the time left."""
    starting = sum(MPI_START_S if e.ranks else START_S for e in checks)
    left = deadline - time.time() - starting
    return min(1.0, left / sum(e.timeout for e in checks))


def not_run(exercise, limit):
    """The verdict of a check that the time limit left no time for."""
    return verdict_of(
        exercise,
        "timed_out",
        f"not run: the {limit:g} s that grading one submission may take (the course file's "
        "time_limit) were spent on the checks before it",
    )


def _child_command(root, report, manifest, deadline, limit, user, together, keys):
    bootstrap = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from minidl_course.submission import child_main; sys.exit(child_main(sys.argv[1:]))"
    )
    flag = "together" if together else "apart"
    arguments = [str(report), manifest, repr(deadline), repr(limit), user or "", flag, *keys]
    return [sys.executable, "-c", bootstrap, *arguments]


def child_main(argv):
    """The grading process: run the checks named by their keys, each unit in its own process
    (``units``; all in one with ``together``: the instructor's own code), and write each
    verdict to the pipe ``argv[0]`` as a line of JSON; the clean copy is put back after each
    unit."""
    report, manifest, deadline, limit, user, flag = argv[:6]
    report, deadline, limit = int(report), float(deadline), float(limit)
    traceable(False)
    with open(manifest, "rb") as source:
        files = marshal.load(source)
    os.unlink(manifest)
    catalogue()
    hidden_catalogue()
    checks = [get(key) for key in argv[6:]]
    user = _check_user(user)
    with os.fdopen(report, "w") as out:
        for unit in [checks] if flag == "together" else units(checks):
            scale = time_scale(checks, deadline)
            timed = [dataclasses.replace(e, timeout=round(e.timeout * scale, 1)) for e in unit]
            run = [e for e in timed if e.timeout >= MIN_CHECK_S]
            results = run_forked(run, deadline, user, out.fileno()) if run else []
            results += [not_run(e, limit) for e in timed if e.timeout < MIN_CHECK_S]
            checks = [e for e in checks if e not in unit]
            changed = restore(repository_root(), files)
            for result in results:
                if changed:
                    result.message += (
                        f"\n  the code changed the grader's files ({', '.join(changed[:5])}"
                        + (", ..." if len(changed) > 5 else "")
                        + "): put back before the next check"
                    )
                out.write(json.dumps(result.to_json()) + "\n")
            out.flush()
    return 0


def _from_json(item):
    item = {k: v for k, v in item.items() if k != "label"}
    ranks = item.pop("ranks")
    return Result(**item, ranks=None if ranks is None else [RankResult(**r) for r in ranks])


def _run_child(root, files, exercises, deadline, limit, user, together):
    """``({key: Result}, exit status or None when stopped at ``deadline``, last output)`` of
    one grading process over ``exercises``."""
    found = {}
    read, write = os.pipe()
    env = dict(
        os.environ,
        PYTHONPATH=root,
        PYTHONDONTWRITEBYTECODE="1",
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
    )
    with (
        tempfile.TemporaryDirectory(prefix="minidl-grade-") as folder,
        tempfile.TemporaryFile() as log,
    ):
        manifest = os.path.join(folder, "files")
        with open(manifest, "wb") as out:
            marshal.dump(files, out)
        keys = [e.key for e in exercises]
        command = _child_command(root, write, manifest, deadline, limit, user, together, keys)
        child = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
            start_new_session=True,
        )
        os.close(write)
        buffer, ended = b"", False
        while not ended:
            data, ended = _read_until(read, deadline, VERDICT_BYTES)
            if not data and not ended:
                break
            *lines, buffer = (buffer + data).split(b"\n")
            for line in lines:
                result = _from_json(json.loads(line))
                found[result.key] = result
        os.close(read)
        try:
            status = child.wait(timeout=max(0.0, deadline - time.time())) if ended else None
        except subprocess.TimeoutExpired:
            status = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # with what the checks' code left running
        child.wait()
        return found, status, _tail(log)


def run_isolated(root, files, exercises, deadline, limit, user="", together=False):
    """The ``Result`` of each check (``exercises``: visible or hidden) run in a grading process
    over the clean copy at ``root`` (its files: ``files``; ``together``: the checks share one
    process and one job per number of ranks). When that process ends before every
    verdict, the first check without one is an error naming the exit status, and the rest run
    in a new one; checks the ``deadline`` leaves no time for are not run."""
    results, remaining = {}, list(exercises)
    while remaining and time.time() < deadline:
        restore(root, files)
        found, status, output = _run_child(root, files, remaining, deadline, limit, user, together)
        results.update(found)
        missing = [e for e in remaining if e.key not in found]
        if not missing or status is None:
            break
        first = missing[0]
        results[first.key] = _without_verdict(first, status, output, "the grading process")
        remaining = missing[1:]
    return [results.get(e.key) or not_run(e, limit) for e in exercises]


@dataclass
class Course:
    """A course file: the assignments (``{name: {id: points}}``), the hidden checks'
    visibility, the seconds grading one submission may take and the user the checks run as
    ("" for the grader's own, None for ``automatic_check_user``'s)."""

    assignments: dict
    hidden_visibility: str = "after_published"
    time_limit: float = TIME_LIMIT_S
    check_user: str | None = None


def read_course(path, exercises):
    """The ``Course`` of a course file, or the default (one assignment per chapter, 1 point
    each); unknown ids, bad points, a bad time limit and an unknown user are named."""
    known = {e.id: e for e in exercises}
    if path is None:
        chapters = {}
        for e in exercises:
            chapters.setdefault(f"{e.id.split('.')[0]}-{e.topic}", {})[e.id] = 1.0
        return Course(chapters)
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
            elif not _number(points) or points < 0:
                problems.append(f"assignment {name!r}: points of {exercise_id} must be >= 0")
    visibility = document.get("hidden_visibility", "after_published")
    if visibility not in VISIBILITIES:
        problems.append(f"hidden_visibility must be one of {', '.join(VISIBILITIES)}")
    limit = document.get("time_limit", TIME_LIMIT_S)
    if not _number(limit) or limit < 10:
        problems.append("time_limit must be the seconds grading one submission may take (>= 10)")
    user = document.get("check_user")
    try:
        _check_user(user)
    except (KeyError, TypeError):
        problems.append(f"check_user {user!r} is not a user of this machine")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return Course(
        {name: {i: float(p) for i, p in items.items()} for name, items in assignments.items()},
        visibility,
        float(limit),
        user,
    )


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
        text = clip_text(
            "\n".join([clip_line(n) for n in notes.get(r.id, [])] + [format_result(r)])
        )
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


def _deadline(start, course):
    """When the checks of a grading that began at ``start`` must have ended (a tenth of the
    time limit, at most 30 s, is kept for writing the results)."""
    return start + course.time_limit - min(30.0, course.time_limit / 10)


def run_copy(files, exercises, deadline, limit, user, together=False):
    """``run_isolated`` over a clean copy holding ``files``, written for the run and removed."""
    clean = tempfile.mkdtemp(prefix="minidl-clean-")
    try:
        os.chmod(clean, 0o755)  # the checks' user reads it
        return run_isolated(clean, files, exercises, deadline, limit, user, together)
    finally:
        shutil.rmtree(clean, ignore_errors=True)


def reference_run(package, exercises, course, start):
    """``{key: evidence}`` of each of ``exercises`` that passes on the instructor's own
    ``package``: the comparisons, per rank, that the passes of a submission are judged against
    (``minidl_course.evidence``); the instructor's code runs as the grader's user, the checks
    in one process and one MPI job per number of ranks."""
    deadline = _deadline(start, course)
    results = run_copy(package, exercises, deadline, course.time_limit, "", together=True)
    return {r.key: r.evidence for r in results if r.status == "passed"}


def reference_cache(package):
    """Where the reference run of ``package`` on this machine is kept: a file readable by this
    user only, named by a digest of the package, Python, NumPy and the machine."""
    digest = hashlib.sha256(marshal.dumps(sorted(package.items())))
    digest.update(f"{sys.version} {numpy.__version__} {platform.machine()}".encode())
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "minidl", f"grading-reference-{digest.hexdigest()[:20]}.json")


def reference_evidence(package, exercises, course, start):
    """``reference_run`` of ``exercises``, from ``reference_cache`` for the checks it holds;
    the checks run anew are added to it (and older caches of other packages removed)."""
    path = reference_cache(package)
    try:
        with open(path, encoding="utf-8") as source:
            known = json.load(source)
    except (OSError, ValueError):
        known = {}
    missing = [e for e in exercises if e.key not in known]
    if not missing:
        return known
    known.update(reference_run(package, missing, course, start))
    folder = os.path.dirname(path)
    with contextlib.suppress(OSError):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        for name in os.listdir(folder):
            if name.startswith("grading-reference-"):
                os.unlink(os.path.join(folder, name))
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            json.dump(known, out)
    return known


def grade_submission(regions, package, points, course, reference, start=None):
    """Gradescope's results document of one submission, from its regions (``region_bodies``)
    and the instructor's ``package`` (``package_files``), each pass judged against
    ``reference`` (a ``Future`` of ``reference_evidence``, awaited once the submission's checks
    have run); ``points``: {id: points}; ``start``: when its grading began (now by default; the
    time limit counts from it)."""
    start = time.time() if start is None else start
    exercises = checks_of(set(points))
    files, notes = clean_files(package, regions, catalogue())
    results = run_copy(
        files, exercises, _deadline(start, course), course.time_limit, course.check_user
    )
    results = [judged(r, reference.result().get(r.key)) for r in results]
    return gradescope(results, points, course.hidden_visibility, notes, time.time() - start)


def can_run_checks_as(name):
    """Raise ``ValueError`` unless the checks can run as user ``name``: the grader runs as root
    and that user can read this Python, its standard library and its packages."""
    if os.geteuid() != 0:
        raise ValueError(f"check_user {name!r}: the grader must run as root to run checks as it")
    paths = [os.path.realpath(p) for p in (sys.executable, os.__file__, numpy.__file__)]
    pid = os.fork()
    if pid == 0:
        try:
            _become(_check_user(name))
            for path in paths:
                with open(path, "rb"):
                    pass
        except OSError:
            EXIT(1)
        EXIT(0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        raise ValueError(
            f"check_user {name!r} cannot read this Python ({', '.join(paths)}): install Python "
            'where that user can read it, or set "check_user": "" in the course file to run '
            "the checks as the grader's user"
        )


AUTOMATIC_CHECK_USER = "nobody"


def automatic_check_user():
    """The user the checks run as when the course file names none: ``nobody`` where the grader
    runs as root and that user can run this Python, else the grader's own (""), saying on
    stderr, when root, what the checks can then reach."""
    if os.geteuid() != 0:
        return ""
    try:
        can_run_checks_as(AUTOMATIC_CHECK_USER)
        return AUTOMATIC_CHECK_USER
    except (ValueError, KeyError) as exc:
        print(
            f"minidl exercise grade: the checks run as root, so a region can read the "
            f"instructor's tree (solutions, hidden checks' source) and write outside the clean "
            f"copy: {exc}",
            file=sys.stderr,
        )
        return ""


@contextlib.contextmanager
def instructor_package_private(course):
    """While grading as root for a ``check_user``: the instructor's ``minidl/`` (solutions,
    hidden checks) readable by root only."""
    package = os.path.join(repository_root(), "minidl")
    if not course.check_user:
        yield
        return
    mode = os.stat(package).st_mode & 0o7777
    os.chmod(package, 0o700)
    try:
        yield
    finally:
        os.chmod(package, mode)


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
    documents by student. What the grading relies on (the instructor's package, every
    submission's regions) is read before any student code runs, and every file is written
    at the end from this process's memory."""
    course = read_course(course_path, catalogue())
    points = {i: p for items in course.assignments.values() for i, p in items.items()}
    found = submissions(folder)
    single = is_submission(folder)
    if course.check_user is None:
        course = dataclasses.replace(course, check_user=automatic_check_user())
    elif course.check_user:
        can_run_checks_as(course.check_user)
    start = time.time()
    package = package_files(repository_root())
    regions = {name: region_bodies(path)[0] for name, path in found.items()}
    documents = {}
    with not_traceable(), instructor_package_private(course), ThreadPoolExecutor(1) as pool:
        # the reference run uses the second core while the first submission's checks run
        reference = pool.submit(reference_evidence, package, checks_of(set(points)), course, start)
        for name in found:
            documents[name] = grade_submission(
                regions[name], package, points, course, reference, start
            )
            start = None  # the first submission's time counts the reference run
            if on_student is not None:
                on_student(name, documents[name])
    os.makedirs(out_dir, exist_ok=True)
    for name, document in documents.items():
        target = out_dir if single else os.path.join(out_dir, name)
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "results.json"), "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
    for assignment, items in course.assignments.items():
        with open(os.path.join(out_dir, f"{assignment}.csv"), "w", newline="") as out:
            table = csv.writer(out)
            table.writerow(["student"] + list(items) + ["total", "max"])
            for name, document in documents.items():
                scores = exercise_scores(document)
                row = [round(scores.get(i, 0.0), 6) for i in items]
                table.writerow([name] + row + [round(sum(row), 6), sum(items.values())])
    return documents
