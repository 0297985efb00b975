"""minidl talks to MPI through ``minidl.dist.comm`` alone: a scan of the sources.

Besides the ``Communicator`` (``comm.py``), two modules of ``minidl.dist``
work on raw mpi4py communicators by design: ``job.py`` (which imports mpi4py,
and aborts the job), and ``collectives.py`` (the allreduce algorithms, run by
``comm.py`` on the communicators it hands them).
"""

import ast
import pathlib

import minidl

PACKAGE = pathlib.Path(minidl.__file__).parent
MAY_IMPORT_MPI4PY = {"dist/job.py", "dist/collectives.py"}
MAY_CALL_MPI = MAY_IMPORT_MPI4PY | {"dist/comm.py"}
# mpi4py's buffer calls (a Communicator's methods are lower case; mpi4py's lower-case
# object calls share their names and are caught by the ``.mpi`` they are reached through)
MPI_CALLS = {
    "Send",
    "Recv",
    "Isend",
    "Irecv",
    "Sendrecv",
    "Waitany",
    "Waitall",
    "Waitsome",
    "Testany",
    "Testall",
    "Testsome",
    "Wait",
    "Test",
    "Cancel",
    "Probe",
    "Iprobe",
    "Barrier",
    "Ibarrier",
    "Bcast",
    "Allreduce",
    "Iallreduce",
    "Allgather",
    "Dup",
    "Get_rank",
    "Get_size",
}


def _modules():
    for folder in ("dist", "cli", "train", "perf"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text())


def _imports_mpi4py(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "mpi4py" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mpi4py":
            return True
    return False


def _raw_mpi_uses(tree):
    """``x.mpi`` (a Communicator's mpi4py communicator) and calls of mpi4py methods."""
    uses = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "mpi":
            uses.add(f"line {node.lineno}: .mpi")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MPI_CALLS
        ):
            uses.add(f"line {node.lineno}: .{node.func.attr}()")
    return uses


def test_only_job_start_up_and_the_allreduce_algorithms_import_mpi4py():
    offenders = [
        name for name, tree in _modules() if name not in MAY_IMPORT_MPI4PY and _imports_mpi4py(tree)
    ]
    assert offenders == [], f"{offenders} import mpi4py; talk to MPI through a Communicator"


def test_no_module_calls_mpi_past_the_communicator():
    offenders = {
        name: sorted(uses)
        for name, tree in _modules()
        if name not in MAY_CALL_MPI and (uses := _raw_mpi_uses(tree))
    }
    assert offenders == {}, f"raw MPI calls: {offenders}; add a Communicator method instead"


def test_the_scan_sees_raw_mpi():
    """The scanner itself: it flags the pre-Communicator code of the parameter server."""
    tree = ast.parse(
        "from mpi4py import MPI\n"
        "request = self.mpi.Isend(data, dest=1, tag=7)\n"
        "ready = MPI.Request.Testsome(receives)\n"
        "everyone = self.comm.mpi.allgather(mine)\n"
        "comm.allgather(payload, out)\n"
    )
    assert _imports_mpi4py(tree)
    assert _raw_mpi_uses(tree) == {
        "line 2: .mpi",
        "line 2: .Isend()",
        "line 3: .Testsome()",
        "line 4: .mpi",
    }
