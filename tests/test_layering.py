"""minidl's packages import one way: each only from its own level and the levels below.

    backend -> autograd -> functional / conv -> layers -> optim -> models / data -> perf
            -> train -> dist -> (the ``minidl`` facade)
    -> the run application (``minidl_app``: the ``minidl`` command)
    -> the course tooling (``minidl_course``: grader, student trees, submissions)

The top-level helper modules sit at the level of what they import (``atomic``,
``chunks``, ``intmath``, ``random`` with the backend; ``gradcheck`` and ``recompute`` with
autograd). ``reference`` and ``exercises`` are leaves: they may import the
whole library, and nothing in the library imports them, not even
lazily in a function or by a module-path string given to ``importlib``
(the application and the course tooling above it may). The one deliberate cycle is
autograd -> functional (``Tensor``'s operators call ``functional``, imported
at the end of ``autograd.py``); any other cycle between packages fails. The one
deliberate upward edge is the command's ``minidl exercise``, which names the course
tooling's command module (looked up when that sub-command runs).

Modules that moved out of the library keep their old import path (``OLD_PATHS``): each such
module only puts its new home in ``sys.modules`` under the old name, and nothing imports it.
The two ``fit`` functions that moved keep their old names (``OLD_NAMES``): ``minidl.train``
and ``minidl.dist`` look them up in the application when first used (PEP 562).

Every ``import`` and ``from ... import`` in the three packages counts, wherever it
stands (module level, function body), with relative imports resolved; so
does any string constant that is exactly the dotted path of one of their modules.
"""

import ast
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import minidl

PACKAGE_DIR = Path(minidl.__file__).parent
ROOT = PACKAGE_DIR.parent
PACKAGES = ("minidl", "minidl_app", "minidl_course")  # the three tiers, lowest first
FACADE = "minidl"
LEVELS = {
    "backend": 0,
    "atomic": 0,
    "chunks": 0,
    "pool": 0,
    "parallel": 0,
    "intmath": 0,
    "random": 0,
    "autograd": 1,
    "gradcheck": 1,
    "recompute": 1,
    "functional": 2,
    "conv": 2,
    "layers": 3,
    "optim": 4,
    "models": 5,
    "data": 5,
    "perf": 6,
    "train": 7,
    "dist": 8,
    FACADE: 9,
    "minidl_app": 10,
    "__main__": 10,  # ``python -m minidl`` runs the command
    "minidl_course": 11,
}
LEAVES = ("reference", "exercises")
COMMAND_LINE = LEVELS["minidl_app"]
DELIBERATE_BACK_EDGES = {("autograd", "functional")}
COMMAND_OF_THE_COURSE = ("minidl_app.cli", "minidl_course.command")  # the one upward import
OLD_PATHS = {  # old import path -> new home
    "minidl.cli": "minidl_app.cli",
    **{
        f"minidl.{path}": f"minidl_app.{path.split('.')[1]}"
        for path in "train.rundir train.metrics train.resume dist.watchdog dist.launch".split()
    },
    "minidl.perf.conv_bench": "minidl_app.conv_bench",
    **{
        f"minidl.exercises.{name}": f"minidl_course.{name}"
        for name in "command grader listing mpi_runner privacy student submission".split()
    },
}
OLD_NAMES = {  # old name -> new home
    "minidl.train.fit": "minidl_app.run.fit",
    "minidl.dist.fit": "minidl_app.run.dist_fit",
}
MOVED_NAME_LOOKUPS = {(old.rpartition(".")[0], "minidl_app.run") for old in OLD_NAMES}
MODULE_PATH = re.compile(r"minidl(_app|_course)?(\.\w+)+")


@dataclass(frozen=True)
class Edge:
    """One import: the importing module, the imported module, and where it stands."""

    source: str  # dotted module name, e.g. "minidl.conv.function"
    target: str
    file: str  # relative to the repository root
    line: int
    statement: str

    def __str__(self):
        return f"{self.file}:{self.line}: {self.statement}"


def package_of(module):
    """``minidl.conv.fft`` -> ``conv``; ``minidl.backend`` -> ``backend``; ``minidl`` -> itself;
    a module of the application or the course tooling -> its tier (``minidl_app.cli.train`` ->
    ``minidl_app``)."""
    parts = module.split(".")
    if parts[0] != FACADE:
        return parts[0]
    return parts[1] if len(parts) > 1 else FACADE


def _module_name(path, package_dir):
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module, is_package, node):
    """The absolute module that ``from <dots><name> import ...`` in ``module`` names."""
    if node.level == 0:
        return node.module
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _edges_of(path, package_dir, modules):
    module, is_package = _module_name(path, package_dir), path.name == "__init__.py"
    source = path.read_text()
    file = str(path.relative_to(package_dir.parent))
    for node in ast.walk(ast.parse(source, file)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and MODULE_PATH.fullmatch(node.value)
            and node.value in modules
        ):
            targets = [node.value]
        for target in targets:
            if target.split(".")[0] in PACKAGES:
                yield Edge(module, target, file, node.lineno, ast.get_source_segment(source, node))


def import_edges(*package_dirs):
    """Every import of a module of the three packages by one of them (by default; else of the
    packages in ``package_dirs``), as ``Edge``s; the old import paths' aliases and the
    command's ``minidl exercise`` and the moved names' lookups left out."""
    package_dirs = [Path(d) for d in package_dirs] or [ROOT / name for name in PACKAGES]
    files = [(path, folder) for folder in package_dirs for path in sorted(folder.rglob("*.py"))]
    modules = {_module_name(path, folder) for path, folder in files}
    edges = (
        edge
        for path, folder in files
        for edge in _edges_of(path, folder, modules)
        if edge.source not in OLD_PATHS
        and (edge.source, edge.target) != COMMAND_OF_THE_COURSE
        and (edge.source, edge.target) not in MOVED_NAME_LOOKUPS
    )
    return list(dict.fromkeys(edges))  # ``from a import b, c`` of one module counts once


def _cycles(edges):
    """Per strongly connected set of two or more packages (Tarjan): its packages, and its
    edges that do not go down a level (the ones to remove to break the cycle)."""
    graph = {}
    for e in edges:
        a, b = package_of(e.source), package_of(e.target)
        if a != b and (a, b) not in DELIBERATE_BACK_EDGES:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while not component or v not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [
        (
            sorted(c),
            [
                e
                for e in edges
                if package_of(e.source) in c
                and package_of(e.target) in c
                and package_of(e.source) != package_of(e.target)
                and not _downward(e)
            ],
        )
        for c in components
    ]


def _rank(package):
    return float("inf") if package in LEAVES else LEVELS.get(package, float("inf"))


def _downward(edge):
    """An import of a strictly lower level: never the edge that closes a cycle."""
    return _rank(package_of(edge.target)) < _rank(package_of(edge.source))


def layering_violations(edges):
    """One line per violation, naming the rule, the file and the import."""
    problems = []
    for e in edges:
        a, b = package_of(e.source), package_of(e.target)
        if a == b or (a, b) in DELIBERATE_BACK_EDGES:
            continue
        for package in (a, b):
            if package not in LEVELS and package not in LEAVES:
                problems.append(f"{e}: package {package!r} has no level; add it to LEVELS")
        if a not in LEVELS or (b not in LEVELS and b not in LEAVES):
            continue
        if b in LEAVES:
            if LEVELS[a] < COMMAND_LINE:
                problems.append(
                    f"{e}: the library ({a}) imports the leaf {b!r}; "
                    f"only {b} itself (or the command line) may"
                )
        elif LEVELS[b] > LEVELS[a]:
            problems.append(
                f"{e}: {a} (level {LEVELS[a]}) imports the higher {b} (level {LEVELS[b]})"
            )
    for packages, cycle in _cycles(edges):
        problems += [f"{e}: part of the package cycle {' <-> '.join(packages)}" for e in cycle]
    return list(dict.fromkeys(problems))  # ``from a import b, c`` of two submodules: once


def test_minidl_imports_follow_the_layers():
    problems = layering_violations(import_edges())
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_nothing_imports_an_old_import_path_and_each_is_its_new_home():
    used = [
        f"{e}: import {e.target} from its new home" for e in import_edges() if e.target in OLD_PATHS
    ]
    assert not used, "\n".join(used)
    for old, new in OLD_PATHS.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from minidl.cli.train import parse_dist_mode  # a submodule of a moved package too

    from minidl_app.cli.train import parse_dist_mode as at_home

    assert parse_dist_mode is at_home
    for old, new in OLD_NAMES.items():
        module, _, name = old.rpartition(".")
        home, _, new_name = new.rpartition(".")
        at_home = getattr(importlib.import_module(home), new_name)
        assert getattr(importlib.import_module(module), name) is at_home, old


def test_import_minidl_loads_neither_the_application_nor_the_course_tooling():
    """What ``import minidl; import minidl.dist`` loads, in a fresh interpreter."""
    probe = (
        "import sys, minidl, minidl.dist; "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in sys.argv[1:]))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe, *PACKAGES[1:]],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    assert loaded == [], f"import minidl loads {loaded}"


# the parallelisms of minidl.dist: they take what a run gives them as callbacks or arguments
PARALLELISMS = tuple(
    f"minidl.dist.{name}"
    for name in "tensor spatial pipeline consistency data_parallel compression grid".split()
)
# the run machinery: run folders, resume, metrics, the run itself, faults, launching, the CLI
RUN_MACHINERY = tuple(
    f"minidl.{name}"
    for name in ("train.progress train.run dist.parallelize dist.straggler").split()
) + ("minidl_app",)


def _within(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def machinery_violations(edges):
    """One line per import of the run machinery by a parallelism, or of perf by the
    Communicator."""
    problems = []
    for e in edges:
        if _within(e.source, PARALLELISMS) and _within(e.target, RUN_MACHINERY):
            problems.append(f"{e}: the parallelism {e.source} imports the run machinery")
        if e.source == "minidl.dist.comm" and _within(e.target, ("minidl.perf",)):
            problems.append(f"{e}: the Communicator imports perf")
    return problems


def test_parallelisms_take_the_run_machinery_as_arguments_not_imports():
    problems = machinery_violations(import_edges())
    assert not problems, "\n".join(problems)


def test_the_machinery_check_catches_each_kind():
    edges = [
        edge("minidl.dist.tensor.layers", "minidl_app.watchdog"),
        edge("minidl.dist.consistency.server", "minidl_app.rundir"),
        edge("minidl.dist.comm", "minidl.perf.allreduce_cost"),
        edge("minidl.dist.parallelize", "minidl.dist.tensor"),
        edge("minidl.dist.pipeline.trainer", "minidl.dist.data_parallel"),
    ]
    problems = machinery_violations(edges)
    assert len(problems) == 3, problems
    assert "parallelism minidl.dist.tensor.layers imports the run machinery" in problems[0]
    assert "Communicator imports perf" in problems[2]


# ------------------------------------------------ the checker itself catches each kind
def edge(source, target, statement="import"):
    return Edge(source, target, source.replace(".", "/") + ".py", 1, statement)


def test_an_upward_import_is_reported_with_its_file_and_statement():
    problems = layering_violations(
        [edge("minidl.conv.fft", "minidl.layers.module", "from ..layers.module import Module")]
    )
    assert problems == [
        (
            "minidl/conv/fft.py:1: from ..layers.module import Module: conv (level 2) "
            "imports the higher layers (level 3)"
        )
    ]


def test_the_library_importing_the_application_or_the_course_tooling_is_reported():
    for source in ("minidl.train.run", "minidl", "minidl.dist.parallelize"):
        for target in ("minidl_app.cli.train", "minidl_course.grader"):
            (problem,) = layering_violations([edge(source, target)])
            assert f"imports the higher {target.split('.')[0]}" in problem
    (problem,) = layering_violations([edge("minidl_app.cli.train", "minidl_course.student")])
    assert "minidl_app (level 10) imports the higher minidl_course (level 11)" in problem


def test_a_library_import_of_a_leaf_is_reported_even_from_the_top():
    for source in ("minidl.conv.function", "minidl.dist.collectives", "minidl"):
        for leaf in LEAVES:
            (problem,) = layering_violations([edge(source, f"minidl.{leaf}")])
            assert f"imports the leaf {leaf!r}" in problem
    assert (
        layering_violations(
            [
                edge("minidl_course.command", "minidl.exercises"),
                edge("minidl.exercises.checks.conv", "minidl.reference.conv"),
                edge("minidl.reference.conv.fft", "minidl.conv.fft"),
            ]
        )
        == []
    )


def test_a_cycle_is_reported_but_not_the_deliberate_one():
    assert (
        layering_violations(
            [
                edge("minidl.autograd", "minidl.functional"),
                edge("minidl.functional.arithmetic", "minidl.autograd"),
            ]
        )
        == []
    )
    problems = layering_violations(
        [
            edge("minidl.conv.base", "minidl.functional.pooling"),
            edge("minidl.functional.conv", "minidl.conv"),
        ]
    )
    assert len(problems) == 2 and all("package cycle conv <-> functional" in p for p in problems)
    leaves = layering_violations(
        [
            edge("minidl.reference.conv", "minidl.exercises"),
            edge("minidl.exercises.checks.conv", "minidl.reference.conv"),
        ]
    )
    assert len(leaves) == 2 and all("exercises <-> reference" in p for p in leaves)


def test_an_unknown_package_must_be_given_a_level():
    (problem,) = layering_violations([edge("minidl.newpkg.thing", "minidl.backend")])
    assert "package 'newpkg' has no level" in problem


def test_imports_are_found_everywhere_and_resolved(tmp_path):
    root = tmp_path / "minidl"
    (root / "conv").mkdir(parents=True)
    for name in ("__init__.py", "backend.py", "conv/__init__.py", "conv/base.py"):
        (root / name).write_text("")
    (root / "conv" / "fft.py").write_text(
        "from .base import x\nfrom .. import backend\n"
        "def f():\n    from ..reference import conv\n    import minidl.exercises\n"
        "    importlib.import_module('minidl.conv.base')\n"
    )
    found = {(e.source, e.target, e.line) for e in import_edges(root)}
    assert found == {
        ("minidl.conv.fft", "minidl.conv.base", 1),
        ("minidl.conv.fft", "minidl.backend", 2),
        ("minidl.conv.fft", "minidl.reference", 4),
        ("minidl.conv.fft", "minidl.exercises", 5),
        ("minidl.conv.fft", "minidl.conv.base", 6),
    }
