"""Run exercise checks and turn what happened into a verdict a student can act on.

Verdicts: ``passed``; ``failed`` (an ``ExerciseFailure``: what was compared,
expected vs got, the element, and the exercise's hint); ``unimplemented``
(the exercise's region still raises ``Unimplemented``); ``error`` (any other
exception: its type, its message and the last line run in the exercise's
file); ``timed_out``; ``skipped`` (an MPI check where MPI is not installed).

In-process checks run in a thread with a deadline rather than in a
subprocess each: a fresh interpreter per check would cost more than the
checks themselves (they take well under a second, importing minidl takes
about one), and a thread keeps the student's traceback objects at hand. When
the deadline passes, the check is reported as timed out and a ``CheckTimeout``
is raised inside its thread, which stops a Python loop that never ends; code
stuck inside a C call cannot be interrupted that way, so its daemon thread is
abandoned and ends with the process.

Checks with ``ranks=N`` run under ``mpiexec -n N`` through
``minidl.exercises.mpi_runner``, all checks of the same size in one job. Each
rank reports each check; a rank that waits longer than the check's timeout
reports that and ends the job, and the checks after it run in a new job.
"""
import ctypes
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from . import ExerciseFailure, Unimplemented, repository_root
from .trace import running

STATUSES = ("passed", "failed", "unimplemented", "error", "timed_out", "skipped")
LABELS = {"passed": "passed", "failed": "FAILED", "unimplemented": "not implemented yet",
          "error": "ERROR", "timed_out": "TIMED OUT", "skipped": "skipped"}
MPI_HANG = "a rank may be waiting for a message nobody sends"
MPI_STARTUP_S = 30.0   # allowance per mpiexec job for starting the ranks and importing minidl
REPORT = "MINIDL-EXERCISE "


class CheckTimeout(BaseException):
    """Raised inside a check's thread when its deadline has passed (not an ``Exception``, so
    ``except Exception`` in student code does not swallow it)."""


@dataclass
class RankResult:
    rank: int
    status: str
    message: str = ""
    seconds: float = 0.0


@dataclass
class Result:
    """The verdict of one exercise's check."""

    id: str
    title: str
    path: str
    status: str
    message: str = ""
    hint: str = ""
    seconds: float = 0.0
    ranks: Optional[List[RankResult]] = field(default=None)

    @property
    def ok(self):
        return self.status in ("passed", "skipped")

    def to_json(self):
        return {**asdict(self), "label": LABELS[self.status]}


def _student_frame(exc, path):
    """The last traceback frame in the exercise's file, else in minidl outside the checks, else the last."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    target = os.path.normcase(os.path.abspath(os.path.join(repository_root(), path)))
    checks = os.path.join(repository_root(), "minidl", "exercises")
    for wanted in (lambda f: os.path.normcase(os.path.abspath(f.filename)) == target,
                   lambda f: f.filename.startswith(os.path.join(repository_root(), "minidl"))
                   and not f.filename.startswith(checks)):
        found = [f for f in frames if wanted(f)]
        if found:
            return found[-1]
    return frames[-1]


def _where(frame):
    if frame is None:
        return ""
    try:
        shown = os.path.relpath(frame.filename, repository_root())
    except ValueError:
        shown = frame.filename
    return f"{shown}, line {frame.lineno}, in {frame.name}" + (f": {frame.line}" if frame.line else "")


def outcome(exercise, exc):
    """``(status, message)`` for a check of ``exercise`` that raised ``exc`` (None: it returned)."""
    if exc is None:
        return "passed", ""
    if isinstance(exc, Unimplemented):
        if exc.exercise_id == exercise.id:
            return "unimplemented", str(exc)
        return "error", (f"the check of exercise {exercise.id} ran the region of exercise "
                         f"{exc.exercise_id}, which is not implemented yet; a check must use only "
                         f"its own exercise's regions ({exc})")
    if isinstance(exc, ExerciseFailure):
        return "failed", str(exc)
    if isinstance(exc, CheckTimeout):
        return "timed_out", f"no answer after {exercise.timeout:g} s: a loop may never end"
    frame = _student_frame(exc, exercise.path)
    text = str(exc)
    if not text and isinstance(exc, AssertionError):
        text = f"assert failed: {frame.line}" if frame and frame.line else "an assert failed"
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if frame is not None:
        message += f"\n  in {_where(frame)}"
    return "error", message


def _call_with_deadline(function, args, timeout):
    """``(exception or None, timed_out)`` of ``function(*args)`` run in a thread for ``timeout`` s."""
    box = {}

    def target():
        try:
            function(*args)
        except BaseException as exc:  # noqa: B036 -- every outcome is reported, CheckTimeout included
            box["exc"] = exc

    worker = threading.Thread(target=target, daemon=True, name="minidl-exercise-check")
    worker.start()
    worker.join(timeout)
    if not worker.is_alive():
        return box.get("exc"), False
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident),
                                               ctypes.py_object(CheckTimeout))
    worker.join(1.0)
    return None, True


def invoke(exercise, *args):
    """Call the check with the trace attributed to it (``args``: the communicator for MPI checks)."""
    with running(exercise.id):
        exercise.check(*args)


def run_in_process(exercise):
    """Run one in-process check with its deadline; returns a ``Result``."""
    start = time.perf_counter()
    exc, timed_out = _call_with_deadline(invoke, (exercise,), exercise.timeout)
    if timed_out:
        status, message = outcome(exercise, CheckTimeout())
    else:
        status, message = outcome(exercise, exc)
    return _result(exercise, status, message, time.perf_counter() - start)


def _result(exercise, status, message, seconds, ranks=None):
    return Result(exercise.id, exercise.title, exercise.path, status, message,
                  exercise.hint if status in ("failed", "error", "unimplemented") else "",
                  seconds, ranks)


def _mpi_command(exercises):
    """Arguments after ``python`` for the runner: import this tree's minidl first, whatever the cwd."""
    root = repository_root()
    bootstrap = (f"import sys; sys.path.insert(0, {root!r}); "
                 "from minidl.exercises.mpi_runner import main; sys.exit(main(sys.argv[1:]))")
    return ["-c", bootstrap] + [f"{e.check.__module__}:{e.id}" for e in exercises]


def parse_reports(output):
    """``{id: {rank: RankResult}}`` from the runner's reports (a rank's first report for a check wins).

    The ranks share one output stream, so a report may not start a line: each
    one is found by its prefix and decoded up to the end of its JSON object.
    """
    reports, decoder = {}, json.JSONDecoder()
    start = output.find(REPORT)
    while start >= 0:
        try:
            item, _ = decoder.raw_decode(output, start + len(REPORT))
        except json.JSONDecodeError:
            item = None   # cut by another rank's output: that rank's check counts as not reported
        if item is not None:
            reports.setdefault(item["id"], {}).setdefault(
                item["rank"], RankResult(item["rank"], item["status"], item["message"],
                                         item["seconds"]))
        start = output.find(REPORT, start + 1)
    return reports


def combine_ranks(exercise, per_rank, nranks, job_timed_out, output):
    """One ``Result`` from the reports of every rank (missing ranks: they hung or the job died)."""
    hung = job_timed_out or any(r.status == "timed_out" for r in per_rank.values())
    ranks = [per_rank.get(r) or (RankResult(r, "timed_out", "no report: still running when the job "
                                                             "was stopped") if hung else
                                 RankResult(r, "error", "no report: the MPI job ended first"))
             for r in range(nranks)]
    seconds = max(r.seconds for r in ranks)
    if all(r.status == "passed" for r in ranks):
        return _result(exercise, "passed", "", seconds, ranks)
    first = min((r for r in ranks if r.status != "passed"),
                key=lambda r: ("error", "failed", "unimplemented", "timed_out").index(r.status))
    summary = "(" + ", ".join(f"rank {r.rank} {LABELS[r.status]}" for r in ranks) + ")"
    if first.status == "timed_out":
        message = f"timed out after {exercise.timeout:g} s: {MPI_HANG}\n  {summary}"
    else:
        message = f"rank {first.rank}: {first.message}\n  {summary}"
    if first.message.endswith("the MPI job ended first"):
        tail = [line for line in output.strip().splitlines() if REPORT not in line][-15:]
        message += "\n  the job's last output:\n    " + "\n    ".join(tail)
    return _result(exercise, first.status, message, seconds, ranks)


def run_mpi_group(exercises, nranks):
    """Run MPI checks of the same size in as few ``mpiexec`` jobs as hangs allow; yields Results."""
    from ..dist.launch import mpi_unavailable_reason, run_mpi
    reason = mpi_unavailable_reason()
    if reason:
        for e in exercises:
            yield _result(e, "skipped", f"needs MPI: {reason}. Install mpi4py and an MPI library "
                                        "(pip install 'minidl[mpi]', or your system's MPICH/Open "
                                        "MPI), then run the check again", 0.0)
        return
    path = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": repository_root() + (os.pathsep + path if path else ""),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    remaining = list(exercises)
    while remaining:
        budget = sum(e.timeout for e in remaining) + MPI_STARTUP_S
        job = run_mpi(nranks, _mpi_command(remaining), timeout=budget, env=env)
        reports = parse_reports(job.output)
        if not reports and not job.timed_out:   # the job failed before any check: same for all
            for e in remaining:
                yield combine_ranks(e, {}, nranks, False, job.output)
            return
        if job.returncode == 0 and not job.timed_out:
            stop = len(remaining)
        else:   # the job ended in the last check that reported; the ones after it run in a new job
            stop = max([i for i, e in enumerate(remaining) if e.id in reports], default=0) + 1
        for e in remaining[:stop]:
            yield combine_ranks(e, reports.get(e.id, {}), nranks, job.timed_out, job.output)
        remaining = remaining[stop:]


def grade(exercises, on_result=None):
    """Run the checks (in process first, then MPI by size); ``on_result(result)`` as each ends."""
    results = []

    def keep(result):
        results.append(result)
        if on_result is not None:
            on_result(result)

    for e in exercises:
        if e.ranks is None:
            keep(run_in_process(e))
    sizes = sorted({e.ranks for e in exercises if e.ranks is not None})
    for size in sizes:
        for result in run_mpi_group([e for e in exercises if e.ranks == size], size):
            keep(result)
    order = {e.id: i for i, e in enumerate(exercises)}
    return sorted(results, key=lambda r: order[r.id])


def summary(results):
    """``{status: count}`` over every status (zeros included)."""
    return {s: sum(r.status == s for r in results) for s in STATUSES}


def format_result(result):
    """Lines for a terminal: the verdict, then the message and hint indented."""
    head = f"{result.id:6s} {result.title}"
    timing = f" ({result.seconds:.2f} s)" if result.status == "passed" else ""
    lines = [f"{head} ... {LABELS[result.status]}{timing}"]
    if result.message:
        lines += ["    " + line for line in result.message.splitlines()]
    if result.hint:
        lines.append(f"    hint: {result.hint}")
    return "\n".join(lines)


def format_summary(results):
    counts = summary(results)
    words = {"unimplemented": "not implemented yet", "timed_out": "timed out", "error": "errors"}
    return ", ".join(f"{n} {words.get(s, s)}" for s, n in counts.items() if n or s == "passed")


def report_json(results):
    """The ``--json`` document: every result and the counts."""
    return {"results": [r.to_json() for r in results], "summary": summary(results),
            "python": sys.executable, "root": repository_root()}
