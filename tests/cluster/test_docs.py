"""docs/cluster.md's emulated-cluster commands run as written (with this test's MPI)."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi
ROOT = pathlib.Path(__file__).resolve().parents[2]


def documented_commands():
    """The shell block that follows the marker in docs/cluster.md, one command per entry."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    block = re.search(r"tests/cluster/test_docs.py -->\n```sh\n(.*?)```", text, re.S).group(1)
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def guide_blocks(mpi, slurm):
    """The shell blocks of docs/cluster.md marked ``runs this block: MPI[ slurm]``."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    pattern = r"tests/cluster/test_docs.py runs this block: (\w+)( slurm)? -->\n```sh\n(.*?)```"
    return [
        block
        for kind, on_slurm, block in re.findall(pattern, text, re.S)
        if kind == mpi and bool(on_slurm) == slurm
    ]


# SLURM's PMI-2 server now and then misreads MPICH's start-up message on a loaded machine
PMI2_START_UP_FAULT = "mpi/pmi2: value not properly terminated in client request"


@pytest.mark.parametrize("slurm", [False, True], ids=["ssh", "slurm"])
def test_the_real_cluster_commands_of_the_guide_run_on_emulated_nodes(cluster, tmp_path, slurm):
    here = cluster(2, slurm=slurm)  # skips where a cluster (with SLURM) cannot be built
    blocks = guide_blocks(here.mpi, slurm)
    assert blocks, f"docs/cluster.md has no block for {here.mpi}{' under SLURM' if slurm else ''}"
    for block in blocks:
        for attempt in range(2):  # SLURM's PMI-2 start-up fault (docs/cluster.md): once more
            for run in re.findall(r"--out (\S+)", block) if attempt else ():
                shutil.rmtree(tmp_path / run, ignore_errors=True)
            done = subprocess.run(
                here.on("node0", ["sh", "-ec", block]),
                cwd=tmp_path,
                env=here.login_env(),
                capture_output=True,
                text=True,
                timeout=240,
            )
            if done.returncode == 0 or PMI2_START_UP_FAULT not in done.stderr:
                break
        assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"
    runs = re.findall(r"--out (\S+)", "".join(blocks))
    assert len(runs) >= 2
    for run in runs:  # every run trained its epoch on 4 ranks
        config = json.loads((tmp_path / run / "config.json").read_text())
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        records = [r for r in map(json.loads, lines) if r["kind"] == "epoch"]
        assert (config["world_size"], len(records)) == (4, 1), run


def test_the_emulated_cluster_commands_of_the_guide_run(cluster, cluster_tool, tmp_path):
    here = cluster(1)  # skips where a cluster cannot be built
    name = f"doc{os.getpid()}"
    env = {
        **os.environ,
        **here.env(),
        "MINIDL_CLUSTER_OWNER": str(os.getpid()),  # down_stale's if this test is killed
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
    }
    try:
        for command in documented_commands():
            command = command.replace("sudo ", "").replace("--name demo", f"--name {name}")
            command = command.replace("/demo/", f"/{name}/")
            command = command.replace("--mpi openmpi", "")  # --mpi auto: this test's MPI
            command = command.replace("python scripts/", f"{sys.executable} {ROOT}/scripts/")
            command = re.sub(r"\bpython -m", f"{sys.executable} -m", command)
            done = subprocess.run(
                command,
                shell=True,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    finally:
        cluster_tool.Cluster(1, name=name).down()
    lines = (tmp_path / "runs" / "cluster-demo" / "metrics.jsonl").read_text().splitlines()
    epochs = [r for r in map(json.loads, lines) if r["kind"] == "epoch"]
    assert len(epochs) == 2  # the resumed run added its epoch
    assert not any(ns.startswith(f"minidl-{name}-") for ns in cluster_tool._namespaces())


def test_a_cluster_brought_up_by_command_for_an_owner_goes_stale_when_the_owner_dies(
    cluster, cluster_tool
):
    cluster(1)  # skips where a cluster cannot be built
    owner = subprocess.Popen(["sleep", "60"])
    name = f"own{os.getpid()}"
    try:
        script = str(ROOT / "scripts" / "cluster.py")
        up = subprocess.run(
            [sys.executable, script, "up", "--nodes", "1", "--name", name],
            env={**os.environ, "MINIDL_CLUSTER_OWNER": str(owner.pid)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert up.returncode == 0, up.stderr
        assert name not in cluster_tool.down_stale()  # its owner lives
        owner.kill()
        owner.wait()
        assert name in cluster_tool.down_stale()
        assert not any(ns.startswith(f"minidl-{name}-") for ns in cluster_tool._namespaces())
    finally:
        owner.kill()
        cluster_tool.Cluster(1, name=name).down()
