"""What an emulated node has of its own (``scripts/cluster.py``), as a real node would."""

import os
import subprocess

import pytest

pytestmark = pytest.mark.mpi


def on(cluster, node, script):
    done = subprocess.run(
        cluster.on(node, ["sh", "-c", script]),
        env=cluster.login_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_each_node_has_its_own_dev_shm_and_down_removes_it(cluster):
    # MPICH names a job's segment by job and node (mpich_shm_JOB_NODE): with one /dev/shm for
    # every node, a segment left by a killed job on one cluster broke the next cluster's job
    here = cluster(2)
    probe = f"minidl-probe-{os.getpid()}"
    on(here, "node0", f"ssh node1 'echo node1 > /dev/shm/{probe}'")  # the agent, as mpiexec
    assert on(here, "node1", f"cat /dev/shm/{probe}") == "node1\n"
    assert on(here, "node0", f"ls /dev/shm/{probe} 2>/dev/null || echo none") == "none\n"
    assert not os.path.exists(f"/dev/shm/{probe}")
    here.down()
    assert not os.path.exists(here.shm)
