"""The emulated cluster fixture: ``cluster(nodes)`` brings up nodes that go away after the test.

Each test gets its own cluster (its own namespaces, so tests under MPICH and
Open MPI can run side by side); the nodes, their processes and files are
removed when the test ends, fails or times out, and clusters left by a
killed test process are removed by the next session (``down_stale``).
"""

import importlib.util
import itertools
import os
import pathlib
import sys

import pytest

from minidl_app.launch import MpiRun, mpi_unavailable_reason, mpiexec_flavor, mpiexec_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")


def _load_script():
    spec = importlib.util.spec_from_file_location("cluster_script", ROOT / "scripts" / "cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cluster_script = _load_script()
_names = itertools.count()


def job_env(extra=None):
    """A job's environment: this checkout first on the path, one BLAS thread per rank."""
    path = os.environ.get("PYTHONPATH")
    return {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
        **(extra or {}),
    }


class ClusterJobs:
    """A ``scripts/cluster.py`` cluster driven by this test's MPI (the one next to Python)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.mpiexec = mpiexec_path()
        self.mpi = mpiexec_flavor(self.mpiexec)

    def __getattr__(self, name):
        return getattr(self.cluster, name)

    def env(self, extra=None):
        return job_env(extra)

    def login_env(self, extra=None):
        """The whole environment of a command run on node0 as on a login node: the cluster's
        (``node_env``: ssh, SLURM, MPI on the links), the job's, and this Python first."""
        env = {**os.environ, **self.cluster.node_env(), **self.env(extra)}
        env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"
        return env

    def start(self, ranks, *args, env=None, flags=()):
        """Start ``mpiexec [flags] python *args`` on node0 with ``ranks`` ranks per node."""
        argv = [sys.executable, *map(str, args)]
        return self.cluster.start(argv, ranks, self.mpi, self.mpiexec, self.env(env), flags)

    def finish(self, process, timeout=120):
        code, output, timed_out = self.cluster.finish(process, timeout)
        return MpiRun(code, output, None, timed_out)

    def run(self, ranks, *args, timeout=120, env=None):
        return self.finish(self.start(ranks, *args, env=env), timeout)

    def copy_data_to_local_disks(self):
        """Fashion-MNIST on every node's local disk (hard links): ``self.local`` on each node."""
        for node in self.nodes:
            for f in DATA.iterdir():
                os.link(f, os.path.join(self.disk(node), f.name))
        return self.local


@pytest.fixture
def cluster():
    """``cluster(nodes, rate=None, slurm=False)`` -> a ``ClusterJobs`` that is up (with SLURM
    on its nodes if ``slurm``); skips with the reason where it cannot be built (not root, no
    iproute2, no MPI, no SLURM)."""
    reason = cluster_script.unavailable_reason() or mpi_unavailable_reason()
    if reason:
        pytest.skip(f"emulated cluster: {reason}")
    cluster_script.down_stale()
    made = []

    def make(nodes, rate=None, slurm=False):
        reason = cluster_script.slurm_unavailable_reason() if slurm else None
        if reason:
            pytest.skip(f"emulated cluster with SLURM: {reason}")
        name = f"t{os.getpid()}x{next(_names)}"
        made.append(cluster_script.Cluster(nodes, rate=rate, name=name))
        made[-1].up()
        if slurm:
            made[-1].start_slurm()
        return ClusterJobs(made[-1])

    yield make
    for c in made:
        c.down()


@pytest.fixture
def cluster_tool():
    """The ``scripts/cluster.py`` module."""
    return cluster_script
