"""Exercise mode: regions of the reference tier that students write, and the checks that grade them.

A region is marked in the reference code (``minidl/reference/``)::

    def im2col(x, kh, kw):
        # BEGIN EXERCISE 3.1
        ...the reference solution...
        # END EXERCISE 3.1

``minidl exercise student DIR`` writes a copy of minidl in which the lines
between each pair of markers become ``raise Unimplemented("3.1", "<title>")``.
``minidl exercise check 3.1`` runs the exercise's check: it calls the code of
the region and compares it with an oracle that does not depend on any
exercise region (the tuned implementation, a float64 numerical gradient,
PyTorch, a closed form), and says what was expected, what came back, where,
and a hint. A region is whole statements inside one function body; an
exercise may have several regions (a forward and a backward), all in the
file named by its ``path``. A check calls only its own exercise's regions, so
stubbing one exercise fails exactly its check.

Checks live in ``minidl/exercises/checks/<topic>.py`` and register
themselves with the ``exercise`` decorator::

    @exercise("3.1", "im2col: patches into columns", path="minidl/reference/conv/im2col.py",
              hint="one slice of the padded input per kernel offset (u, v)")
    def check_im2col():
        expect_close("columns of a 2x3x5x5 input", got, expected)

A check with ``ranks=N`` runs on N MPI ranks and receives the communicator:
``def check(comm): ...``; it must fail on every rank alike or abort.

While grading, each comparison that holds is noted with its values (``held``), and the
grader judges a pass by these notes against the reference solutions' run; a comparison
whose expected value the checked code computed itself says ``from_code=True``.

Hidden checks grade the same regions with their own seeds and sizes. They
live only in the instructor's tree, in ``minidl/exercises/hidden/`` (which a
student tree never receives), and register with ``hidden_check``; ``minidl
exercise grade`` runs them next to the visible ones (see ``submission``).
"""

import hashlib
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .checks import MODULES as CHECK_MODULES


class Unimplemented(NotImplementedError):
    """Raised by a stubbed exercise region: says which exercise, where, and how to check it."""

    def __init__(self, exercise_id, title=None):
        self.exercise_id = str(exercise_id)
        caller = sys._getframe(
            1
        )  # the stub's line (inspect.stack() would read every frame's source)
        self.where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        what = f"exercise {self.exercise_id}" + (f" ({title})" if title else "")
        super().__init__(
            f"{what} is not implemented yet: write it between '# BEGIN EXERCISE "
            f"{self.exercise_id}' and '# END EXERCISE {self.exercise_id}' "
            f"({self.where}), then run "
            f"'python -m minidl exercise check {self.exercise_id}'"
        )


class ExerciseFailure(AssertionError):
    """A check's verdict: what was compared, what was expected, what came back, and where.

    ``values``: a digest of the whole arrays compared on this process (set by ``expect_close``
    and ``expect_equal``), so that the grader says that MPI ranks failed alike only when their
    values were the same, not merely their messages.
    """

    def __init__(self, what, expected=None, got=None, where=None, detail=None, values=""):
        self.what, self.expected, self.got, self.where, self.detail = (
            what,
            expected,
            got,
            where,
            detail,
        )
        self.values = values
        lines = [what]
        if where is not None:
            lines.append(f"  at {where}")
        if expected is not None or got is not None:
            lines += [f"  expected: {expected}", f"  got:      {got}"]
        if detail:
            lines.append(f"  {detail}")
        super().__init__("\n".join(lines))


def values_digest(*values):
    """A short digest of ``values`` (arrays by dtype, shape and bytes; anything else by repr)."""
    digest = hashlib.sha256()
    for value in values:
        if isinstance(value, np.ndarray):
            digest.update(f"{value.dtype.str}{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:16]


EVIDENCE = None  # while grading: a list of the comparisons that held, in order (``held``)


def held(kind, what, got=None, expected=None, rtol=0.0, atol=0.0, from_code=False):
    """Note a comparison that held (``kind``: "close", "equal" or "true") while grading, so that
    the grader can judge it again apart from the code (``minidl_course.evidence``)."""
    if EVIDENCE is not None:
        EVIDENCE.append((kind, what, got, expected, rtol, atol, from_code))


def _shape_text(a):
    return f"shape {tuple(np.shape(a))}, dtype {getattr(a, 'dtype', type(a).__name__)}"


def expect_close(what, got, expected, rtol=1e-5, atol=1e-8, from_code=False):
    """Raise ``ExerciseFailure`` unless ``got`` matches ``expected`` elementwise (NumPy arrays).

    The failure names the first shape or dtype mismatch, a NaN, or the worst
    element (index, expected value, got value, its error and the tolerance).
    ``from_code``: ``expected`` comes from the checked code too (a second call, the indices it
    chose), so a right answer may differ from the reference solution's: the grader judges the
    pair by itself rather than against the reference run.
    """
    from ..backend import to_numpy

    if got is None:
        raise ExerciseFailure(
            f"{what}: the code returned None",
            _shape_text(expected),
            "None",
            detail="a 'return' is missing",
        )
    got, expected = np.asarray(to_numpy(got)), np.asarray(to_numpy(expected))
    if got.shape != expected.shape:
        raise ExerciseFailure(
            f"{what}: wrong shape",
            _shape_text(expected),
            _shape_text(got),
            values=values_digest(got, expected),
        )
    g, e = got.astype(np.float64), expected.astype(np.float64)
    if got.size == 0:
        held("close", what, g, e, rtol, atol, from_code)
        return
    if not np.all(np.isfinite(got)) and np.all(np.isfinite(expected)):
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(got))[0])
        raise ExerciseFailure(
            f"{what}: non-finite value",
            expected[index],
            got[index],
            where=index,
            values=values_digest(got, expected),
        )
    excess = np.abs(g - e) - (atol + rtol * np.abs(e))
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    if excess[worst] > 0:
        bad = int((excess > 0).sum())
        raise ExerciseFailure(
            f"{what}: {bad} of {excess.size} elements differ",
            e[worst],
            g[worst],
            where=f"index {tuple(int(i) for i in worst)}",
            detail=f"|got - expected| = {abs(g[worst] - e[worst]):.3g} > "
            f"atol {atol:g} + rtol {rtol:g} * |expected|",
            values=values_digest(got, expected),
        )
    held("close", what, g, e, rtol, atol, from_code)


def expect_equal(what, got, expected, from_code=False):
    """Raise ``ExerciseFailure`` unless ``got == expected`` (numbers, tuples, lists, strings);
    ``from_code`` as for ``expect_close``."""
    if got != expected:
        raise ExerciseFailure(
            f"{what}: not equal", expected, got, values=values_digest(got, expected)
        )
    held("equal", what, got, expected, from_code=from_code)


def expect_true(what, condition, detail=None):
    """Raise ``ExerciseFailure`` naming ``what`` unless ``condition`` holds."""
    if not condition:
        raise ExerciseFailure(what, detail=detail)
    held("true", what)


def changed_in_place(before, after, name):
    """The name of the first array in ``after`` (arrays nested in tuples, lists and dicts) that
    differs from its copy ``before``, e.g. ``cache[1]``; None when nothing changed."""
    from ..backend import to_numpy

    if isinstance(before, np.ndarray):
        same = np.array_equal(before, to_numpy(after), equal_nan=before.dtype.kind in "fc")
        return None if same else name
    if isinstance(before, (tuple, list)):
        pairs = [(f"{name}[{i}]", b, a) for i, (b, a) in enumerate(zip(before, after))]
    elif isinstance(before, dict):
        pairs = [(f"{name}[{k!r}]", b, after[k]) for k, b in before.items()]
    else:
        return None
    return next((found for found in (changed_in_place(*p[1:], p[0]) for p in pairs) if found), None)


@dataclass
class Exercise:
    """One exercise: its id, what it asks, where its regions are, and its check."""

    id: str
    title: str
    path: str  # the file of its regions, relative to the repository root
    hint: str
    check: Callable
    ranks: int | None = None  # None: in process; N: under mpiexec on N ranks
    timeout: float = 60.0  # seconds before the grader declares a hang
    test: str = ""  # a hidden check's name; "" for the exercise's visible check

    @property
    def topic(self):
        return self.check.__module__.rsplit(".", 1)[-1]

    @property
    def key(self):
        """The check's unique name: ``6.1`` (visible) or ``6.1:hidden-name``."""
        return f"{self.id}:{self.test}" if self.test else self.id

    @property
    def visible(self):
        return not self.test


_CATALOGUE = {}
_HIDDEN = {}  # key -> Exercise of every hidden check imported (instructor's tree only)
HIDDEN_PACKAGE = "hidden"  # minidl/exercises/hidden/: never copied into a student tree


def exercise(exercise_id, title, path, hint, ranks=None, timeout=60.0):
    """Register the decorated function as the check of exercise ``exercise_id``."""

    def register(check):
        if exercise_id in _CATALOGUE and _CATALOGUE[exercise_id].check is not check:
            raise ValueError(
                f"exercise {exercise_id} is registered twice "
                f"({_CATALOGUE[exercise_id].check.__module__} and {check.__module__})"
            )
        _CATALOGUE[exercise_id] = Exercise(exercise_id, title, path, hint, check, ranks, timeout)
        return check

    return register


def hidden_check(exercise_id, test, ranks=None, timeout=60.0):
    """Register the decorated function as hidden check ``test`` of exercise ``exercise_id``.

    Its title, path and hint are the visible exercise's; it runs only under
    ``minidl exercise grade`` and ``minidl exercise check --hidden`` (instructor's tree).
    """

    def register(check):
        visible = registered(exercise_id)
        _HIDDEN[f"{exercise_id}:{test}"] = Exercise(
            exercise_id, visible.title, visible.path, visible.hint, check, ranks, timeout, test
        )
        return check

    return register


def hidden_catalogue():
    """Every hidden check, in id order; empty in a student tree (no ``hidden`` package)."""
    try:
        package = importlib.import_module(f"{__name__}.{HIDDEN_PACKAGE}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{HIDDEN_PACKAGE}":
            raise
        return []
    for name in package.MODULES:
        importlib.import_module(f"{package.__name__}.{name}")
    return [_HIDDEN[k] for k in sorted(_HIDDEN, key=_sort_key)]


def _sort_key(key):
    exercise_id, _, test = key.partition(":")
    return tuple(int(part) if part.isdigit() else 0 for part in exercise_id.split(".")) + (
        exercise_id,
        test,
    )


def catalogue():
    """Every exercise, in id order (imports the check modules on first use)."""
    for name in CHECK_MODULES:
        importlib.import_module(f"{__name__}.checks.{name}")
    return [_CATALOGUE[k] for k in sorted(_CATALOGUE, key=_sort_key)]


def get(exercise_id):
    """The exercise with this id (or a hidden check's key); unknown ids list the valid ones."""
    found = {e.id: e for e in catalogue()}
    if ":" in exercise_id and exercise_id.split(":")[0] in found:
        hidden = {e.key: e for e in hidden_catalogue()}
        if exercise_id in hidden:
            return hidden[exercise_id]
    if exercise_id not in found:
        raise KeyError(
            f"no exercise {exercise_id!r}; 'minidl exercise list' shows them ({', '.join(found)})"
        )
    return found[exercise_id]


def registered(key):
    """The check registered under ``key`` (an id or a hidden check's key) by the modules
    imported so far, else ``get(key)``: an MPI rank imports only its checks' modules."""
    found = _CATALOGUE.get(key) or _HIDDEN.get(key)
    return found if found is not None else get(key)


def repository_root():
    """The folder that holds the ``minidl`` package (paths of exercises are relative to it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
