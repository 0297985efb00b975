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
``minidl_course.mpi_runner``, all checks of the same size in one job,
which reports each rank's verdict of each check. A hang (a rank past the
check's timeout, or the others still waiting after one rank's check
raised) or an abort ends the job; the verdict of the check it ended in
comes from the ranks' reports, else from the traceback a rank printed, and
the checks after it run in a new job.
"""

import contextlib
import ctypes
import io
import json
import os
import re
import sys
import tempfile
import threading
import time
import traceback
import unicodedata
from dataclasses import asdict, dataclass, field

import minidl.exercises
from minidl.exercises import ExerciseFailure, Unimplemented, repository_root
from minidl.exercises.trace import running

from .evidence import encode

LABELS = {
    "passed": "passed",
    "failed": "FAILED",
    "unimplemented": "not implemented yet",
    "error": "ERROR",
    "timed_out": "TIMED OUT",
    "skipped": "skipped",
}
STATUSES = tuple(LABELS)
MPI_HANG = "a rank may be waiting for a message nobody sends"
MPI_STARTUP_S = 30.0  # allowance per mpiexec job for starting the ranks and importing minidl
REPORT = "MINIDL-EXERCISE "  # the runner's per-rank verdicts start with this
EVIDENCE_VARIABLE = "MINIDL_EXERCISE_EVIDENCE"  # set to 1: the runner's passes carry evidence
READY = (
    "MINIDL-EXERCISE-READY"  # ... and a rank that has imported the checks and joined MPI says this
)


class CheckTimeout(BaseException):
    """Raised inside a check's thread when its deadline has passed (not an ``Exception``, so
    ``except Exception`` in student code does not swallow it)."""


class ProcessExit(BaseException):
    """Raised instead of ending the process when checked code calls ``os._exit``."""

    def __init__(self, status):
        super().__init__(
            f"the code called os._exit({status}), which would end the grader without a "
            "verdict: return from the function instead"
        )


@dataclass
class RankResult:
    rank: int
    status: str
    message: str = ""
    seconds: float = 0.0
    values: str = ""  # the digest of the values a failure compared on this rank
    evidence: list | None = None  # while grading, a pass's comparisons on this rank (``evidence``)


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
    ranks: list[RankResult] | None = field(default=None)
    test: str = ""  # a hidden check's name, "" for the visible check
    output: str = ""  # what the checked code printed (stdout and stderr), shown with the verdict
    evidence: list | None = None  # while grading, a pass's comparisons, a list per rank

    @property
    def key(self):
        return f"{self.id}:{self.test}" if self.test else self.id

    @property
    def ok(self):
        return self.status in ("passed", "skipped")

    def to_json(self):
        document = {**asdict(self), "label": LABELS[self.status]}
        for part in [document] + (document["ranks"] or []):
            if part["evidence"] is None:
                del part["evidence"]
        return document


def _student_frame(frames, path):
    """The last frame in the exercise's file, else in minidl outside the checks, else the last."""
    if not frames:
        return None
    root = repository_root()
    target = os.path.normcase(os.path.abspath(os.path.join(root, path)))
    checks = os.path.join(root, "minidl", "exercises")
    for wanted in (
        lambda f: os.path.normcase(os.path.abspath(f.filename)) == target,
        lambda f: (
            f.filename.startswith(os.path.join(root, "minidl"))
            and not f.filename.startswith(checks)
        ),
    ):
        found = [f for f in frames if wanted(f)]
        if found:
            return found[-1]
    return frames[-1]


def _where(frame):
    try:
        shown = os.path.relpath(frame.filename, repository_root())
    except ValueError:
        shown = frame.filename
    return f"{shown}, line {frame.lineno}, in {frame.name}" + (
        f": {frame.line}" if frame.line else ""
    )


def verdict(exercise, kind, text, frames):
    """``(status, message)`` of a check that raised an exception of class name ``kind``.

    ``text`` is the exception's message and ``frames`` its traceback
    (``traceback.FrameSummary`` items, outermost first).
    """
    if kind == "Unimplemented":
        raised = text.split()[1] if text.startswith("exercise ") else "?"
        if raised == exercise.id:
            return "unimplemented", text
        return "error", (
            f"the check of exercise {exercise.id} ran the region of exercise {raised}, "
            f"which is not implemented yet; a check must use only its own exercise's "
            f"regions ({text})"
        )
    if kind == "ExerciseFailure":
        return "failed", text
    frame = _student_frame(frames, exercise.path)
    if not text and kind == "AssertionError":
        text = f"assert failed: {frame.line}" if frame and frame.line else "an assert failed"
    message = f"{kind}: {text}" if text else kind
    if frame is not None:
        message += f"\n  in {_where(frame)}"
    return "error", message


def outcome(exercise, exc):
    """``(status, message)`` for a check of ``exercise`` that raised ``exc`` (None: it returned)."""
    if exc is None:
        return "passed", ""
    if isinstance(exc, CheckTimeout):
        where = f"\n  {exc}" if str(exc) else ""
        return "timed_out", f"no answer after {exercise.timeout:g} s: a loop may never end{where}"
    kind = (
        "Unimplemented"
        if isinstance(exc, Unimplemented)
        else "ExerciseFailure"
        if isinstance(exc, ExerciseFailure)
        else type(exc).__name__
    )
    return verdict(exercise, kind, str(exc), traceback.extract_tb(exc.__traceback__))


FRAME = re.compile(r'  File "(.+)", line (\d+), in (.+)$')


def crash_outcome(exercise, output):
    """``(status, message)`` from the last Python traceback a rank printed before the job ended.

    An MPI check may abort the job when one rank fails (so that no rank waits
    forever); the traceback it printed still says what went wrong. None when
    the output holds no complete traceback.
    """
    lines = output.splitlines()
    starts = [
        i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")
    ]
    if not starts:
        return None
    frames, body = [], lines[starts[-1] + 1 :]
    while body and body[0].startswith(" "):
        match = FRAME.match(body.pop(0))
        if match:
            code = body[0].strip() if body and not FRAME.match(body[0]) else ""
            frames.append(
                traceback.FrameSummary(
                    match[1], int(match[2]), match[3], line=code, lookup_line=False
                )
            )
    if not body or not frames:
        return None
    kind, _, text = body.pop(0).partition(": ")
    more = []
    while body and body[0].startswith("  "):  # an ExerciseFailure's indented lines
        more.append(body.pop(0))
    return verdict(exercise, kind.rsplit(".", 1)[-1], "\n".join([text] + more), frames)


def stuck_line(path, thread_id):
    """Where thread ``thread_id`` is now, preferring a line of the file ``path``; "" if gone."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return ""
    found = _student_frame(traceback.extract_stack(frame), path)
    return f"stuck at {_where(found)}" if found else ""


def _call_with_deadline(function, args, timeout, path, **keywords):
    """The exception of ``function(*args, **keywords)`` run in a thread for ``timeout`` s (None
    when it returned; a ``CheckTimeout`` saying where the thread was when the deadline passed)."""
    box = {}

    def target():
        try:
            function(*args, **keywords)
        except BaseException as exc:  # noqa: BLE001 -- every outcome is reported, CheckTimeout included
            box["exc"] = exc

    worker = threading.Thread(target=target, daemon=True, name="minidl-exercise-check")
    worker.start()
    worker.join(timeout)
    if not worker.is_alive():
        return box.get("exc")
    stuck = CheckTimeout(stuck_line(path, worker.ident))
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(worker.ident), ctypes.py_object(CheckTimeout)
    )
    worker.join(1.0)
    return stuck


EXIT = os._exit  # the grader's own way out (watchdogs, aborts), whatever a check does to os


def invoke(exercise, *args, evidence=None):
    """Call the check with the trace attributed to it (``args``: the communicator for MPI
    checks), noting the comparisons that hold in the list ``evidence`` (when given);
    ``os._exit`` called by the checked code in this thread raises ``ProcessExit`` instead of
    ending the process."""
    checked = threading.get_ident()

    def refuse_exit(status):
        if threading.get_ident() != checked:
            return EXIT(status)
        raise ProcessExit(status)

    os._exit = refuse_exit
    minidl.exercises.EVIDENCE = evidence
    try:
        with running(exercise.id):
            exercise.check(*args)
    finally:
        os._exit = EXIT
        minidl.exercises.EVIDENCE = None


OUTPUT_KEPT = 64 * 1024  # characters of what a check's code printed that are kept (the last)
LINE_CHARS = 300  # characters shown of one line of a verdict
SHOWN_LINES = 20  # lines shown of what the code printed (the last)
CHECK_CHARS = 4000  # characters of one check's verdict, message, hint and output together


class Tail(io.TextIOBase):
    """A text stream that keeps only the last ``OUTPUT_KEPT`` characters written to it."""

    def __init__(self):
        self.parts, self.size = [], 0

    def writable(self):
        return True

    def write(self, text):
        self.parts.append(text)
        self.size += len(text)
        if self.size > 2 * OUTPUT_KEPT:  # trimmed now and then: each write stays cheap
            self.parts = [self.getvalue()]
            self.size = len(self.parts[0])
        return len(text)

    def getvalue(self):
        return "".join(self.parts)[-OUTPUT_KEPT:]


@contextlib.contextmanager
def captured_output():
    """Collect what runs inside the block prints, from Python and from C (file descriptors
    1 and 2), into the yielded ``Tail`` instead of the terminal (its last characters only)."""
    text = Tail()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                yield text
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(max(0, os.fstat(sink.fileno()).st_size - OUTPUT_KEPT))
            text.write(sink.read().decode("utf-8", "replace"))


def printable(text):
    """``text`` with every control and format character but newline and tab escaped (NUL as
    ``\\x00``, a right-to-left override as ``\\u202e``), so that it shows as it is."""
    return "".join(
        c
        if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp")
        else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def clip_line(line):
    """One line of a verdict: printable and at most ``LINE_CHARS`` characters."""
    line = printable(line)
    if len(line) <= LINE_CHARS:
        return line
    return f"{line[:LINE_CHARS]} ... ({len(line) - LINE_CHARS} more characters)"


def clip_text(text, limit=CHECK_CHARS):
    """``text`` cut to its first ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n    ... ({len(text) - limit} more characters left out)"


def run_in_process(exercise, evidence=False):
    """Run one in-process check with its deadline, its output captured; returns a ``Result``
    (with a pass's ``evidence`` when asked)."""
    start, items = time.perf_counter(), [] if evidence else None
    with captured_output() as printed:
        exc = _call_with_deadline(
            invoke, (exercise,), exercise.timeout, exercise.path, evidence=items
        )
    status, message = outcome(exercise, exc)
    result = verdict_of(exercise, status, message, time.perf_counter() - start)
    result.output = printed.getvalue()
    if evidence and status == "passed":
        result.evidence = [encode(items)]
    return result


def verdict_of(exercise, status, message, seconds=0.0, ranks=None):
    """The ``Result`` of ``exercise``: its hint only with a verdict that is not a pass."""
    return Result(
        exercise.id,
        exercise.title,
        exercise.path,
        status,
        message,
        exercise.hint if status in ("failed", "error", "unimplemented", "timed_out") else "",
        seconds,
        ranks,
        exercise.test,
    )


def _mpi_command(report_path, exercises):
    """Arguments after ``python`` for the runner: import this tree's minidl first, whatever
    the cwd."""
    root = repository_root()
    bootstrap = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from minidl_course.mpi_runner import main; sys.exit(main(sys.argv[1:]))"
    )
    return ["-c", bootstrap, report_path] + [
        f"{e.check.__module__}:{e.key}={e.timeout!r}" for e in exercises
    ]


def _run_job(nranks, exercises, env):
    """``(MpiRun, the report file's text)`` of one runner job over ``exercises``."""
    from minidl_app.launch import run_mpi

    budget = sum(e.timeout for e in exercises) + MPI_STARTUP_S
    with tempfile.TemporaryDirectory(prefix="minidl-exercise-") as folder:
        path = os.path.join(folder, "reports")
        job = run_mpi(nranks, _mpi_command(path, exercises), timeout=budget, env=env)
        text = ""
        if os.path.exists(path):
            with open(path) as reports:
                text = reports.read()
    return job, text


def parse_reports(output):
    """``({id: {rank: RankResult}}, ids some rank reported as hung)`` from the runner's reports.

    A rank's first report for a check is its verdict; a later one is its
    watchdog saying it then waited for the others. Each report is found by
    its prefix and decoded up to the end of its JSON object, so a line cut
    short by a killed rank does no harm.
    """
    reports, hung, decoder = {}, set(), json.JSONDecoder()
    start = output.find(REPORT)
    while start >= 0:
        try:
            item, _ = decoder.raw_decode(output, start + len(REPORT))
        except json.JSONDecodeError:
            item = None  # cut short: that rank's check counts as not reported
        if item is not None:
            reports.setdefault(item["id"], {}).setdefault(
                item["rank"],
                RankResult(
                    item["rank"],
                    item["status"],
                    item["message"],
                    item["seconds"],
                    item.get("values", ""),
                    item.get("evidence"),
                ),
            )
            if item["status"] == "timed_out":
                hung.add(item["id"])
        start = output.find(REPORT, start + 1)
    return reports, hung


PRIORITY = ("error", "failed", "unimplemented", "timed_out")


def combine_ranks(exercise, per_rank, nranks, hung, output):
    """One ``Result`` from the ranks' reports; ``hung``: the job was stopped while in this check.

    The verdict is the most serious one a rank reported; with none, a hang
    (ranks that never reported), else the traceback of a rank that ended the
    job, else the job's last output.
    """
    missing = [r for r in range(nranks) if r not in per_rank]
    bad = [per_rank[r] for r in sorted(per_rank) if per_rank[r].status != "passed"]
    seconds = max([r.seconds for r in per_rank.values()], default=0.0)
    if not bad and not missing:
        ranks = [per_rank[r] for r in range(nranks)]
        result = verdict_of(exercise, "passed", "", seconds, ranks)
        if any(r.evidence is not None for r in ranks):
            result.evidence = [r.evidence for r in ranks]
            for r in ranks:
                r.evidence = None
        return result
    hang_note = f"timed out after {exercise.timeout:g} s: {MPI_HANG}"
    crash = None if bad or hung else crash_outcome(exercise, output)
    alike = not missing and len({(r.status, r.message) for r in per_rank.values()}) == 1
    if bad:
        first = min(bad, key=lambda r: PRIORITY.index(r.status))
        status = first.status
        stuck = [r for r in bad if r.status == "timed_out"]
        message = (
            "\n  ".join([hang_note] + [f"rank {r.rank}: {r.message}" for r in stuck])
            if status == "timed_out"
            else first.message
            if alike
            else f"rank {first.rank}: {first.message}"
        )
    elif hung:
        status, message = "timed_out", hang_note
    elif crash:
        status, message = crash
    else:
        status = "error"
        message = "the MPI job ended early; its last output:\n    " + "\n    ".join(
            output.strip().splitlines()[-15:]
        )
    absent = RankResult(0, "timed_out" if hung else "error", "no report")
    ranks = [per_rank.get(r) or RankResult(r, absent.status, absent.message) for r in range(nranks)]
    if alike and _same_values(per_rank.values()):
        message += f"\n  (the same on all {nranks} ranks)"
    elif alike:
        message += (
            f"\n  (all {nranks} ranks reported this; the values they compared differ, "
            "or the check shared one rank's failure with the others)"
        )
    elif not per_rank:
        message += "\n  (no rank reported: the job ended first)"
    else:
        message += (
            "\n  ("
            + ", ".join(
                f"rank {r.rank} " + (LABELS[r.status] if r.rank in per_rank else "no report")
                for r in ranks
            )
            + ")"
        )
    if hung and status != "timed_out":
        message += f"\n  the other ranks were still waiting: {MPI_HANG}"
    return verdict_of(exercise, status, message, seconds, ranks)


def _same_values(ranks):
    """Whether ranks that reported the same message also held the same values: a failure
    needs the digest of its values on every rank, and one digest for all."""
    ranks = list(ranks)
    if ranks[0].status != "failed":
        return True
    digests = {r.values for r in ranks}
    return len(digests) == 1 and "" not in digests


def run_mpi_group(exercises, nranks, evidence=False):
    """Run MPI checks of the same size in as few ``mpiexec`` jobs as hangs allow; yields Results
    (with a pass's ``evidence`` when asked)."""
    from minidl_app.launch import mpi_unavailable_reason

    reason = mpi_unavailable_reason()
    if reason:
        for e in exercises:
            yield verdict_of(
                e,
                "skipped",
                f"needs MPI: {reason}. Install mpi4py and an MPI library "
                "(pip install 'minidl[mpi]', or your system's MPICH/Open "
                "MPI), then run the check again",
                0.0,
            )
        return
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}  # the bootstrap finds the tree
    if evidence:
        env[EVIDENCE_VARIABLE] = "1"
    remaining = list(exercises)
    while remaining:
        job, text = _run_job(nranks, remaining, env)
        reports, hung = parse_reports(text)
        if READY not in text:  # the ranks failed before the first check: same for every one
            for e in remaining:
                yield combine_ranks(e, {}, nranks, job.timed_out, job.output)
            return
        # the ranks wait for each other after every check, so the job ended in the first
        # check that hung or that not every rank reported; the checks after it run in a new job
        stop = next(
            (
                i + 1
                for i, e in enumerate(remaining)
                if e.key in hung or len(reports.get(e.key, {})) < nranks
            ),
            len(remaining),
        )
        for i, e in enumerate(remaining[:stop]):
            yield combine_ranks(
                e,
                reports.get(e.key, {}),
                nranks,
                e.key in hung or (job.timed_out and i == stop - 1),
                job.output,
            )
        remaining = remaining[stop:]


def grade(exercises, on_result=None, evidence=False):
    """Run the checks (in process first, then MPI by size); ``on_result(result)`` as each ends;
    ``evidence``: each pass carries its comparisons (``minidl_course.evidence``)."""
    results = []

    def keep(result):
        results.append(result)
        if on_result is not None:
            on_result(result)

    for e in exercises:
        if e.ranks is None:
            keep(run_in_process(e, evidence))
    sizes = sorted({e.ranks for e in exercises if e.ranks is not None})
    for size in sizes:
        for result in run_mpi_group([e for e in exercises if e.ranks == size], size, evidence):
            keep(result)
    order = {e.key: i for i, e in enumerate(exercises)}
    return sorted(results, key=lambda r: order[r.key])


def summary(results):
    """``{status: count}`` over every status (zeros included)."""
    return {s: sum(r.status == s for r in results) for s in STATUSES}


def format_result(result):
    """Lines for a terminal: the verdict, then the message, the hint and the last lines the code
    printed, indented; control characters escaped, lines cut to ``LINE_CHARS`` and the whole to
    about ``CHECK_CHARS`` (half of it at most for the message, the rest for the last lines)."""
    head = f"{result.id:6s} {result.title}" + (f" [hidden: {result.test}]" if result.test else "")
    timing = f" ({result.seconds:.2f} s)" if result.status == "passed" else ""
    lines = [f"{head} ... {LABELS[result.status]}{timing}"]
    if result.message:
        lines += ["    " + clip_line(line) for line in result.message.splitlines()]
    if result.hint:
        lines.append(f"    hint: {result.hint}")
    text = clip_text("\n".join(lines), CHECK_CHARS // 2)
    printed = result.output.rstrip().splitlines()
    shown, room = [], CHECK_CHARS - len(text)
    for line in reversed(printed[-SHOWN_LINES:]):
        line = "      | " + clip_line(line)
        room -= len(line) + 1
        if room < 0:
            break
        shown.insert(0, line)
    if printed:
        left_out = len(printed) - len(shown)
        text += "\n    the code printed" + (
            f" ({left_out} lines before these):" if left_out > 0 else ":"
        )
        text += "".join("\n" + line for line in shown)
    return text


def format_summary(results):
    counts = summary(results)
    return ", ".join(
        f"{n} {LABELS[s].lower()}" + ("s" if s == "error" and n != 1 else "")
        for s, n in counts.items()
        if n or s == "passed"
    )


def report_json(results):
    """The ``--json`` document: every result and the counts."""
    return {
        "results": [r.to_json() for r in results],
        "summary": summary(results),
        "python": sys.executable,
        "root": repository_root(),
    }
