"""The student tree: a copy of minidl whose exercise regions raise ``Unimplemented``.

``write_student_tree(out_dir)`` copies the repository's packages (``minidl/``, and
``minidl_app/`` and ``minidl_course/`` that run it), ``examples/`` and ``pyproject.toml`` to
``out_dir`` with a README for students, and replaces the lines between
``# BEGIN EXERCISE x.y`` and ``# END EXERCISE x.y`` with
``raise Unimplemented("x.y", "<title>")`` at the markers' indentation. The marker lines
stay, so the student sees where to write. ``mode="trace"`` keeps the solutions and makes
every region record that it ran instead (see ``minidl.exercises.trace``).

Before anything is written the markers are validated; every problem is
reported with its file and line: a BEGIN without END (or the reverse), nested
regions, an END whose id differs from its BEGIN, a region whose id has no
registered exercise or lies outside the exercise's ``path``, an exercise
with no region, and a region that is not whole statements of one block inside
one function body.
"""

import ast
import difflib
import io
import json
import os
import re
import shutil
import tokenize
from dataclasses import dataclass

MARKER = re.compile(r"#\s*(BEGIN|END)\s+EXERCISE\s+([\w.]+)\s*$")
LOOKS_LIKE_MARKER = re.compile(r"#\s*(begin|end)\s+exercise\b", re.IGNORECASE)
MODES = ("stub", "trace")
PACKAGES = ("minidl", "minidl_app", "minidl_course")  # the library, the command, the course tools
COPIED = (*PACKAGES, "examples", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
HIDDEN_DIR = os.path.join("minidl", "exercises", "hidden")  # the hidden checks: instructor only


def ignored_for_students(folder, names):
    """What a student tree never receives: caches, and the hidden checks."""
    skip = set(IGNORED(folder, names))
    if os.path.normpath(folder).endswith(os.path.dirname(HIDDEN_DIR)):
        skip.add(os.path.basename(HIDDEN_DIR))
    return skip


STUB_IMPORT = "from minidl.exercises import Unimplemented\n"
TRACE_IMPORT = "from minidl.exercises.trace import record_region\n"


class MarkerError(ValueError):
    """The exercise markers are inconsistent; ``problems`` lists each as ``file:line: what``."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__(
            "exercise markers are inconsistent; fix these and run again:\n  "
            + "\n  ".join(self.problems)
        )


@dataclass(frozen=True)
class Region:
    """One marked region: its exercise, file (relative to the root), marker lines and
    indentation."""

    exercise_id: str
    path: str
    begin: int  # line of '# BEGIN EXERCISE', 1-based
    end: int  # line of '# END EXERCISE'
    indent: str

    @property
    def where(self):
        return f"{self.path}:{self.begin}"


def _marker_lines(text):
    """``(line, kind, id, indent)`` of every line that is a marker alone, read line by line: the
    markers of a file that does not tokenize (a region with an unclosed bracket or string)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip())]
        match = MARKER.match(line.strip())
        if match:
            found.append((number, match.group(1), match.group(2), indent))
    return found


def _markers(text, path, problems):
    """``(line, kind, id, indent)`` of every marker comment (comments in strings do not count;
    in a file that does not tokenize, every line that is a marker alone)."""
    found = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        problems.append(f"{path}: cannot be read as Python ({exc})")
        return _marker_lines(text)
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        line, col = token.start
        match = MARKER.match(token.string)
        if match and token.line[:col].strip() == "":
            found.append((line, match.group(1), match.group(2), token.line[:col]))
        elif match or LOOKS_LIKE_MARKER.match(token.string):
            problems.append(
                f"{path}:{line}: '{token.string.strip()}' is not a marker: write "
                "'# BEGIN EXERCISE x.y' or '# END EXERCISE x.y' alone on its line"
            )
    return found


def _pair_markers(markers, path, problems):
    """Regions from BEGIN/END pairs, reporting unbalanced, nested and mismatched markers."""
    regions, open_ = [], None
    for line, kind, exercise_id, indent in markers:
        if kind == "BEGIN":
            if open_:
                problems.append(
                    f"{path}:{line}: BEGIN EXERCISE {exercise_id} is nested inside "
                    f"region {open_[2]} opened at line {open_[0]}: close that one first"
                )
            open_ = (line, indent, exercise_id)
        elif open_ is None:
            problems.append(
                f"{path}:{line}: END EXERCISE {exercise_id} has no BEGIN EXERCISE "
                f"{exercise_id} before it"
            )
        elif exercise_id != open_[2]:
            problems.append(
                f"{path}:{line}: END EXERCISE {exercise_id} closes region {open_[2]} "
                f"opened at line {open_[0]}: the ids must match"
            )
            open_ = None
        elif indent != open_[1]:
            problems.append(
                f"{path}:{line}: END EXERCISE {exercise_id} is indented differently "
                f"from its BEGIN at line {open_[0]}"
            )
            open_ = None
        else:
            regions.append(Region(exercise_id, path, open_[0], line, indent))
            open_ = None
    if open_:
        problems.append(
            f"{path}:{open_[0]}: BEGIN EXERCISE {open_[2]} has no END EXERCISE {open_[2]} after it"
        )
    return regions


def _parents(tree):
    """``{id(statement): (parent node, field name)}`` for every statement of the module."""
    parents = {}
    for node in ast.walk(tree):
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                for child in value:
                    if isinstance(child, ast.stmt):
                        parents[id(child)] = (node, field)
    return parents


def _first_line(node):
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _check_placement(region, tree, parents, problems):
    """A region must be whole statements of one block, inside a function body, at their
    indentation."""
    here = region.where
    overlapping = [
        s
        for s in ast.walk(tree)
        if isinstance(s, ast.stmt) and _first_line(s) <= region.end and s.end_lineno >= region.begin
    ]
    inside = [s for s in overlapping if _first_line(s) > region.begin and s.end_lineno < region.end]
    if not inside:
        problems.append(
            f"{here}: region {region.exercise_id} holds no code: put the solution "
            "between the markers"
        )
        return
    inside_ids = {id(s) for s in inside}
    outermost = [s for s in inside if id(parents[id(s)][0]) not in inside_ids]
    blocks = {(id(parents[id(s)][0]), parents[id(s)][1]) for s in outermost}
    if len(blocks) > 1:
        problems.append(
            f"{here}: region {region.exercise_id} spans more than one block (lines "
            f"{outermost[0].lineno} and {outermost[-1].lineno}): keep it inside one"
        )
        return
    chain, node = [], parents[id(outermost[0])][0]
    while node is not None:
        chain.append(node)
        node = parents.get(id(node), (None, None))[0]
    crossing = [s for s in overlapping if id(s) not in inside_ids and s not in chain]
    if crossing:
        problems.append(
            f"{here}: region {region.exercise_id} cuts the statement at line "
            f"{crossing[0].lineno}: a region must hold whole statements"
        )
        return
    kinds = [
        n
        for n in chain
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))
    ]
    if not isinstance(kinds[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        problems.append(
            f"{here}: region {region.exercise_id} is outside a function body: "
            "regions are statements inside one function"
        )
        return
    column = outermost[0].col_offset
    if len(region.indent) != column:
        problems.append(
            f"{here}: the markers of region {region.exercise_id} are indented "
            f"{len(region.indent)} columns, its statements {column}: align them"
        )


def scan_file(text, path):
    """``(regions, problems)`` of one Python source (``path`` relative to the root, for
    messages)."""
    problems = []
    regions = _pair_markers(_markers(text, path, problems), path, problems)
    if regions:
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            problems.append(f"{path}:{exc.lineno}: does not parse: {exc.msg}")
            return regions, problems
        parents = _parents(tree)
        for region in regions:
            _check_placement(region, tree, parents, problems)
    return regions, problems


def find_regions(root):
    """``(regions, problems)`` over every ``.py`` file of ``root/minidl``, in path and line
    order."""
    regions, problems = [], []
    package = os.path.join(root, "minidl")
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            full = os.path.join(folder, name)
            with open(full, encoding="utf-8") as source:
                text = source.read()
            if "EXERCISE" in text.upper():
                found, bad = scan_file(text, os.path.relpath(full, root).replace(os.sep, "/"))
                regions += found
                problems += bad
    return regions, problems


def region_texts(root):
    """``([(region, its lines between the markers)], problems)`` of the tree at ``root``; the
    lines keep their line ends."""
    regions, problems = find_regions(root)
    texts, found = {}, []
    for r in regions:
        if r.path not in texts:
            with open(os.path.join(root, r.path), encoding="utf-8") as source:
                texts[r.path] = source.read().splitlines(keepends=True)
        found.append((r, texts[r.path][r.begin : r.end - 1]))
    return found, problems


def validate(regions, exercises):
    """Problems between the regions found and the registered exercises (ids, paths, missing
    regions)."""
    problems = []
    known = {e.id: e for e in exercises}
    for region in regions:
        owner = known.get(region.exercise_id)
        if owner is None:
            problems.append(
                f"{region.where}: region {region.exercise_id} has no registered "
                f"exercise (register a check with @exercise({region.exercise_id!r}, ...) "
                f"in minidl/exercises/checks/; known: {', '.join(known) or 'none'})"
            )
        elif owner.path != region.path:
            problems.append(
                f"{region.where}: region {region.exercise_id} is in this file, but "
                f"exercise {owner.id}'s path is {owner.path}"
            )
    marked = {r.exercise_id for r in regions}
    for e in exercises:
        if e.id not in marked:
            problems.append(
                f"{e.path}: exercise {e.id} ({e.title}) has no region: mark its code with "
                f"'# BEGIN EXERCISE {e.id}' / '# END EXERCISE {e.id}'"
            )
    return problems


def _import_index(tree):
    """The line index after the module docstring and ``__future__`` imports: where imports
    may go."""
    index = 0
    for statement in tree.body:
        docstring = (
            statement is tree.body[0]
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        )
        if not (
            docstring
            or (isinstance(statement, ast.ImportFrom) and statement.module == "__future__")
        ):
            break
        index = statement.end_lineno
    return index


def rewrite(text, regions, mode, titles):
    """The source with ``regions`` stubbed (``mode="stub"``) or instrumented (``mode="trace"``)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for r in sorted(regions, key=lambda r: r.begin, reverse=True):
        if mode == "stub":
            title = json.dumps(titles[r.exercise_id], ensure_ascii=False)
            lines[r.begin : r.end - 1] = [f"{r.indent}{stub_prefix(r.exercise_id)}, {title})\n"]
        else:
            lines.insert(
                r.begin,
                f"{r.indent}record_region({json.dumps(r.exercise_id)}, {json.dumps(r.where)})\n",
            )
    lines.insert(_import_index(ast.parse(text)), STUB_IMPORT if mode == "stub" else TRACE_IMPORT)
    return "".join(lines)


def student_readme(exercises, stubbed):
    """The README of a student tree: how to work on an exercise and the list of them."""
    from .listing import text_table

    todo = [e for e in exercises if e.id in stubbed]
    return f"""# minidl: the course's exercises

This is minidl with {len(todo)} exercises handed out for you to write. Each
region is a function body (or part of one) in `minidl/reference/` between

    # BEGIN EXERCISE x.y
    raise Unimplemented("x.y", "...")
    # END EXERCISE x.y

Replace the `raise` line with your code (keep the two marker lines), then run
the exercise's check from this folder:

    python -m minidl exercise check x.y      # one exercise
    python -m minidl exercise check --all    # every exercise handed out
    python -m minidl exercise status         # passes, fails, not started; points

Run the commands in this folder (or below it): they check the code of this
tree, also when `minidl` is installed from somewhere else. Regions of
exercises not handed out yet say so; your instructor adds them to this tree
later without touching your code. Your grade comes from your regions only,
run by the instructor's copy of the checks, some of them with other inputs.

A check compares your code with an independent oracle and prints what it
compared, the expected and the obtained value, the element where they differ
and a hint. A check tests only its own exercise, so the exercises can be done
in any order. The MPI exercises start `mpiexec` themselves (they need
`pip install mpi4py mpich`, or your system's MPI); a check that waits for a
message nobody sends is stopped after its timeout and reported.

The numbered scripts in `examples/` import this tree's minidl (through the
link `examples/minidl`) and train and measure with its tuned code, so they
run whatever state your exercises are in; code of yours that they call (a
reference algorithm selected by name, `algo="im2col_reference"`) runs there.

## The exercises

```
{text_table(todo)}
```
"""


def stub_prefix(exercise_id):
    """How the stub of a region begins: ``raise Unimplemented("6.1"``."""
    return f"raise Unimplemented({json.dumps(exercise_id)}"


NOT_RELEASED = "not released yet: your instructor adds it with 'minidl exercise release'"
MANIFEST = "exercises.json"  # in a student tree: {"released": [ids]}


def write_student_tree(out_dir, only=None, mode="stub", root=None, exercises=None):
    """Write the student tree to ``out_dir``; returns the regions rewritten.

    ``only``: the exercises released now (default: all). In ``"stub"`` mode
    every region is stubbed: those released say how to check them, the others
    say that they are not released yet, so the tree holds no solution of any
    exercise (``release`` hands out more later). In ``"trace"`` mode the
    regions of ``only`` are instrumented and keep their solutions. ``root``
    and ``exercises`` default to this repository and its catalogue (tests
    pass a fake package and its exercises). Raises ``MarkerError`` listing
    every marker problem before anything is written.
    """
    from minidl.exercises import catalogue, repository_root

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    root = repository_root() if root is None else os.fspath(root)
    exercises = catalogue() if exercises is None else list(exercises)
    regions, problems = find_regions(root)
    problems += validate(regions, exercises)
    chosen = {e.id for e in exercises} if only is None else {str(i) for i in only}
    _check_known(chosen, exercises, "--only")
    if problems:
        raise MarkerError(problems)
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and os.listdir(out_dir):
        raise FileExistsError(
            f"{out_dir} exists and is not empty: choose a new folder or remove it "
            "('minidl exercise release DIR IDS' adds exercises to a tree students work in)"
        )
    titles = {e.id: e.title if e.id in chosen else NOT_RELEASED for e in exercises}
    by_file = {}
    for region in regions:
        if mode == "stub" or region.exercise_id in chosen:
            by_file.setdefault(region.path, []).append(region)
    rewritten = {}
    for path, file_regions in by_file.items():
        with open(os.path.join(root, path), encoding="utf-8") as source:
            text = rewrite(source.read(), file_regions, mode, titles)
        try:
            compile(text, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            problems.append(
                f"{path}:{exc.lineno}: the rewritten file does not compile ({exc.msg}); "
                "regions must hold whole statements"
            )
        rewritten[path] = text
    if problems:
        raise MarkerError(problems)
    os.makedirs(out_dir, exist_ok=True)
    for name in COPIED:
        source = os.path.join(root, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(out_dir, name), ignore=ignored_for_students)
        elif os.path.exists(source):
            shutil.copy2(source, os.path.join(out_dir, name))
    for path, text in rewritten.items():
        with open(os.path.join(out_dir, path), "w", encoding="utf-8") as out:
            out.write(text)
    if os.path.isdir(os.path.join(out_dir, "examples")):  # the examples import this tree
        for package in PACKAGES:
            os.symlink(os.path.join(os.pardir, package), os.path.join(out_dir, "examples", package))
    _write_course_files(out_dir, exercises, chosen)
    return [r for rs in by_file.values() for r in rs]


class UnknownExercises(MarkerError):
    """Ids that name no exercise, each with the nearest known ids; the message says only that
    (a ``MarkerError`` because it stops the same commands before they write anything)."""

    def __init__(self, unknown, known, option):
        guesses = [
            f"{i} (did you mean {' or '.join(near)}?)" if near else i
            for i in unknown
            for near in [difflib.get_close_matches(i, known, n=2, cutoff=0.6)]
        ]
        text = (
            f"{option} names unknown exercises {', '.join(guesses)} "
            "('minidl exercise list' shows them)"
        )
        self.problems = [text]
        ValueError.__init__(self, text)


def _check_known(ids, exercises, option):
    """Raise ``UnknownExercises`` when an id of ``ids`` names no exercise."""
    known = [e.id for e in exercises]
    unknown = sorted(set(ids) - set(known))
    if unknown:
        raise UnknownExercises(unknown, known, option)


def _write_course_files(tree, exercises, released):
    """The tree's README (the released exercises) and its manifest."""
    with open(os.path.join(tree, "README.md"), "w", encoding="utf-8") as out:
        out.write(student_readme(exercises, released))
    with open(os.path.join(tree, MANIFEST), "w", encoding="utf-8") as out:
        order = [e.id for e in exercises if e.id in released]
        json.dump({"released": order}, out, indent=1)
        out.write("\n")


def released(tree):
    """The ids handed out in the student tree ``tree``, or None when it has no manifest (the
    instructor's tree: everything)."""
    path = os.path.join(os.fspath(tree), MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as source:
        return json.load(source)["released"]


def release(tree, ids, exercises=None):
    """Release exercises ``ids`` in the student tree ``tree``: each of their regions that still
    holds the not-released stub gets the exercise's stub; nothing else of the tree changes
    (a student's code stays as it is). Returns the ids newly released."""
    from minidl.exercises import catalogue

    exercises = catalogue() if exercises is None else list(exercises)
    handed_out = released(tree)
    if handed_out is None:
        raise FileNotFoundError(
            f"{tree} is not a student tree ({MANIFEST} is missing): write one with "
            "'minidl exercise student DIR --only IDS'"
        )
    _check_known(ids, exercises, "release")
    new = [i for i in dict.fromkeys(str(i) for i in ids) if i not in handed_out]
    titles = {e.id: e.title for e in exercises}
    regions, _ = find_regions(os.fspath(tree))
    for path in sorted({r.path for r in regions if r.exercise_id in new}):
        full = os.path.join(os.fspath(tree), path)
        with open(full, encoding="utf-8") as source:
            lines = source.read().splitlines(keepends=True)
        for r in regions:
            if r.path != path or r.exercise_id not in new:
                continue
            waiting = f"{r.indent}{stub_prefix(r.exercise_id)}, {json.dumps(NOT_RELEASED)})\n"
            for i in range(r.begin, r.end - 1):
                if lines[i] == waiting:
                    title = json.dumps(titles[r.exercise_id], ensure_ascii=False)
                    lines[i] = f"{r.indent}{stub_prefix(r.exercise_id)}, {title})\n"
        with open(full, "w", encoding="utf-8") as out:
            out.write("".join(lines))
    _write_course_files(os.fspath(tree), exercises, set(handed_out) | set(new))
    return new
