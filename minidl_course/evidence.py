"""A pass needs its evidence: what the student's code returned to each comparison of a check,
judged again by the grader against the same check run on the instructor's own solutions.

A check decides its verdict in the process that runs the student's code, so code written
against the grader could claim a pass it did not earn. While grading, each comparison that
holds (``expect_close``, ``expect_equal``, ``expect_true``: ``minidl.exercises.held``) is
noted, with the values compared; a passing check sends these notes with its verdict, one list
per rank. The grader, which runs no student code, holds the notes of the *reference run*, the
checks run once on the instructor's tree, and keeps a pass only when the check made the same
comparisons (count, kind and text, on every rank) and each value the code gave lies within
the reference comparison's tolerance of the reference's expected value (or of the check's own
expected value, itself within that tolerance of the reference's). Of an array over ``SAMPLE``
elements, that many evenly spaced ones are kept. A claimed pass therefore needs the right
values; what it cannot prove is how they were computed.
"""

import base64

import numpy as np

from minidl.exercises import ExerciseFailure, expect_close, expect_equal

SAMPLE = 512  # the elements of a larger array that are kept, evenly spaced over it


def sample(size):
    """The flat indices kept of an array of ``size`` elements."""
    return np.unique(np.linspace(0, size - 1, min(size, SAMPLE)).astype(np.int64))


def _array(values):
    values = np.asarray(values, dtype="<f8")
    kept = values.reshape(-1)[sample(values.size)] if values.size else values.reshape(-1)
    return {"shape": list(values.shape), "data": base64.b64encode(kept.tobytes()).decode()}


def _from_array(item):
    """``(shape, the kept elements)`` of an encoded array."""
    if not isinstance(item, dict) or not isinstance(item.get("data"), str):
        raise ValueError("not an array")
    shape = tuple(int(n) for n in item["shape"])
    data = np.frombuffer(base64.b64decode(item["data"], validate=True), dtype="<f8")
    if data.size != sample(int(np.prod(shape, dtype=np.int64))).size:
        raise ValueError("its size is not its shape's")
    return shape, data


def plain(value):
    """``value`` as JSON keeps it: NumPy numbers as Python's, tuples as lists, anything else
    that is not a number, a string or None by its ``repr``."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return [[plain(k), plain(v)] for k, v in value.items()]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def encode(items):
    """The comparisons noted by ``minidl.exercises.held`` as JSON values."""
    out = []
    for kind, what, got, expected, rtol, atol, from_code in items:
        item = {"kind": kind, "what": what, "from_code": from_code}
        if kind == "close":
            item.update(got=_array(got), expected=_array(expected), rtol=rtol, atol=atol)
        elif kind == "equal":
            item.update(got=plain(got), expected=plain(expected))
        out.append(item)
    return out


def _failure(what, compare):
    """The message of ``compare()`` (an ``expect_*`` call) failing, else None."""
    try:
        compare()
    except ExerciseFailure as failure:
        return str(failure)[len(what) :].lstrip(": ")
    return None


def _item_problem(mine, theirs):
    """Why the comparison ``mine`` (the student's run) is not borne out by ``theirs`` (the
    reference run), or None."""
    what = theirs["what"]
    if mine.get("kind") != theirs["kind"] or mine.get("what") != what:
        return f"a comparison other than the check's ({mine.get('what')!r} for {what!r})"
    if theirs["kind"] == "true":
        return None
    alone = theirs["from_code"]  # the check's expected value is the code's: judged by itself
    if theirs["kind"] == "equal":
        wanted = mine["expected"] if alone else theirs["expected"]
        return _failure(what, lambda: expect_equal(what, mine["got"], wanted))
    (shape, got), (own_shape, own) = _from_array(mine["got"]), _from_array(mine["expected"])
    rtol, atol = float(theirs["rtol"]), float(theirs["atol"])
    if alone:
        if shape != own_shape:
            return f"shape {shape} against {own_shape}"
        return _failure(what, lambda: expect_close(what, got, own, rtol, atol))
    reference_shape, reference = _from_array(theirs["expected"])
    if shape != reference_shape or own_shape != reference_shape:
        return f"shape {shape} where the reference run has {reference_shape}"
    direct = _failure(what, lambda: expect_close(what, got, reference, rtol, atol))
    if direct is None:
        return None
    close_to_own = _failure(what, lambda: expect_close(what, got, own, rtol, atol))
    own_is_right = _failure(what, lambda: expect_close(what, own, reference, rtol, atol))
    if close_to_own is None and own_is_right is None:
        return None
    if reference.size < int(np.prod(shape)):
        direct += f" (of {reference.size} of its {int(np.prod(shape))} elements, evenly spaced)"
    return direct


def problem(evidence, reference):
    """Why ``evidence`` (a passing check's notes, one list per rank) does not bear out its pass
    against ``reference`` (the reference run's), or None when it does."""
    if not isinstance(evidence, list) or len(evidence) != len(reference):
        return "it sent no record of its comparisons for every rank"
    for rank, (mine, theirs) in enumerate(zip(evidence, reference)):
        where = f"rank {rank}: " if len(reference) > 1 else ""
        if not isinstance(mine, list):
            return f"{where}its record of the comparisons is not a list"
        if len(mine) != len(theirs):
            return f"{where}it made {len(mine)} comparisons where the check makes {len(theirs)}"
        for item, expected in zip(mine, theirs):
            try:
                found = _item_problem(item, expected) if isinstance(item, dict) else "not a record"
            except (KeyError, TypeError, ValueError) as exc:
                found = f"an unreadable record ({type(exc).__name__}: {exc})"
            if found:
                return f"{where}{expected['what']}: {found}"
    return None


def judged(result, reference):
    """``result`` (its ``evidence`` taken off) with a pass that its evidence does not bear out
    against ``reference`` (the reference run's, None when that run did not pass) turned into a
    failure saying why."""
    evidence, result.evidence = result.evidence, None
    if result.status != "passed":
        return result
    if reference is None:
        result.message = (
            "(passed where the code ran; not judged again: the instructor's solutions did not "
            "pass this check in the reference run)"
        )
        return result
    found = problem(evidence, reference)
    if found is not None:
        result.status = "failed"
        result.message = (
            "the check passed in the process that ran the code, but the grader, judging what "
            f"the code gave against the reference run, does not find it right: {found}"
        )
    return result
