"""Node faults on the emulated cluster: a node's link cut mid-run, a node's processes killed.

Either way the job must end (no silent hang), the run's checkpoint and metrics
must stay readable, ``minidl report --check`` must say that the run did not
finish (and why, where minidl itself ended the job) and exit 1, also when the
launcher exits 0, and ``--resume`` must continue the run from its checkpoint.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

HANG_TIMEOUT = 6
TRAIN = (
    "-m minidl train --model lenet5 --subset 1920 --no-progress --batch-size 32 --dist sync "
    f"--hang-timeout {HANG_TIMEOUT} --test-subset 500"
).split()


def epochs_done(run_dir):
    """The epochs of the run's metrics; every line must be whole JSON."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["epoch"] for r in map(json.loads, f) if r["kind"] == "epoch"]


def start_and_wait_for_a_checkpoint(c, out, **launch):
    return wait_for_a_checkpoint(c.start(1, *TRAIN, "--epochs", "50", "--out", out, **launch), out)


def wait_for_a_checkpoint(job, out):
    checkpoint = os.path.join(out, "checkpoint.npz")
    deadline = time.monotonic() + 120
    while not os.path.exists(checkpoint):
        assert job.poll() is None, job.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint after 120 s"
        time.sleep(0.2)
    return job


def check(c, out):
    """``minidl report --check OUT``: (exit status, its line)."""
    argv = [sys.executable, "-m", "minidl", "report", "--check", out]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **c.env()})
    return done.returncode, done.stdout + done.stderr


def assert_intact_and_resumable(c, out):
    """The files a fault left are whole, and the run continues from its checkpoint."""
    state = load_checkpoint(os.path.join(out, "checkpoint.npz"))
    done = epochs_done(out)
    assert done and done == list(range(1, len(done) + 1)), done
    resume = ["--epochs", str(len(done) + 1), "--resume", os.path.join(out, "checkpoint.npz")]
    result = c.run(1, *TRAIN, *resume, timeout=120)
    assert result.returncode == 0 and not result.timed_out, result.output
    assert epochs_done(out) == list(range(1, len(done) + 2))
    assert check(c, out) == (0, f"{out}: finished, {len(done) + 1} epochs\n")
    assert (
        state.model_state.keys()
        == load_checkpoint(os.path.join(out, "checkpoint.npz")).model_state.keys()
    )


def test_a_cut_link_ends_the_job_naming_the_rank_and_host_that_stopped_answering(cluster, tmp_path):
    c = cluster(2)
    out = str(tmp_path / "run")
    job = start_and_wait_for_a_checkpoint(c, out)
    c.link("node1", "down")
    cut = time.monotonic()
    result = c.finish(job, timeout=HANG_TIMEOUT + 60)
    waited = time.monotonic() - cut
    assert not result.timed_out, f"hung:\n{result.output}"
    # minidl aborts after HANG_TIMEOUT; Open MPI's launcher then gives up on the lost node's
    # daemon after its TCP keepalives and retries (~8-15 s on the emulated nodes)
    assert waited < HANG_TIMEOUT + 40, f"{waited:.0f} s to end:\n{result.output}"
    code, line = check(c, out)
    assert code == 1, line
    if "PRTE has lost communication" in result.output:
        # Open MPI's launcher gave up on the lost node's daemon too: it exits 0 and kills
        # rank 0, before or after its watchdog fired; the run folder tells either way
        assert "Remote daemon" in result.output and "on node node1" in result.output
        assert "Not answering: rank 1 on node1" in line or (
            "did not finish: stopped after epoch" in line and "--resume" in line
        ), line
    else:
        assert result.returncode != 0, result.output
        assert "rank 0 on node0 made no progress" in result.output, result.output
        assert "Not answering: rank 1 on node1" in result.output, result.output
        assert "check node1" in result.output and "--resume" in result.output
        assert "aborted after epoch" in line and "Not answering: rank 1 on node1" in line, line
    c.link("node1", "up")
    assert_intact_and_resumable(c, out)


def test_a_node_whose_processes_die_ends_the_job_within_30_s(cluster, tmp_path):
    c = cluster(2)
    out = str(tmp_path / "run")
    job = start_and_wait_for_a_checkpoint(c, out)
    c.kill("node1")
    killed = time.monotonic()
    result = c.finish(job, timeout=60)
    assert not result.timed_out, f"hung:\n{result.output}"
    assert time.monotonic() - killed < 30
    assert "epoch 50/50" not in result.output  # ended early, whatever the launcher's status
    # the launcher kills the surviving ranks within 50 ms (MPICH: SIGKILL; Open MPI:
    # they exit inside MPI), so only the launcher speaks, and only the run folder tells
    # that the run did not finish where the launcher exits 0 (Open MPI)
    code, line = check(c, out)
    assert code == 1 and "did not finish: stopped after epoch" in line, line
    assert f"--resume {out}/checkpoint.npz" in line, line
    assert_intact_and_resumable(c, out)


def keeps_survivors(c):
    """Whether this MPI build has what ``KEEP_SURVIVORS`` asks for: Open MPI's fault-tolerant
    extension (ULFM), or MPICH's OFI network module."""
    tool = "ompi_info" if c.mpi == "openmpi" else "mpichversion"
    path = os.path.join(os.path.dirname(c.mpiexec), tool)
    try:
        text = subprocess.run([path], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return False
    return "FT MPI support: yes" in text if c.mpi == "openmpi" else "ofi" in text


# the launcher's exit status once minidl ended the job (None: Open MPI's launcher under ULFM
# exits 0 after rank 0's MPI_Abort(1); the run folder tells)
STATUS_WHEN_KEPT = {"mpich": 124, "openmpi": None}


def test_a_dead_rank_is_named_by_minidl_where_the_launcher_keeps_the_survivors(
    cluster, cluster_tool, tmp_path
):
    """Launched with ``KEEP_SURVIVORS``' settings, the other ranks outlive a killed rank
    (MPICH: rank 0 waits until its watchdog finds rank 1 silent; Open MPI: its next
    collective fails with ``MPI_ERR_PROC_FAILED``) and minidl names the dead rank."""
    c = cluster(2)
    if not keeps_survivors(c):
        pytest.skip(f"this {c.mpi} build cannot keep the survivors (no ULFM / OFI)")
    out = str(tmp_path / "run")
    env, flags = cluster_tool.KEEP_SURVIVORS[c.mpi]
    job = start_and_wait_for_a_checkpoint(c, out, env=env, flags=flags)
    assert c.kill("node1", command="minidl train") == []  # the rank; its node's launcher lives
    killed = time.monotonic()
    result = c.finish(job, timeout=60)
    assert not result.timed_out, f"hung:\n{result.output}"
    assert time.monotonic() - killed < 30, result.output
    assert STATUS_WHEN_KEPT[c.mpi] in (None, result.returncode), result.output
    assert "Not answering: rank 1 on node1" in result.output, result.output
    assert "check node1" in result.output and "--resume RUN/checkpoint.npz" in result.output
    code, line = check(c, out)
    assert code == 1 and "aborted after epoch" in line, line
    assert "Not answering: rank 1 on node1" in line, line
    assert_intact_and_resumable(c, out)


def test_under_slurm_a_dead_node_ends_the_job_and_the_run_folder_says_why(
    cluster, cluster_tool, tmp_path
):
    """``srun`` keeps a step's other tasks running when a node dies (SLURM's default): with
    MPICH over OFI (``KEEP_SURVIVORS``' environment) rank 0 blocks until its watchdog names
    the dead node's rank; Open MPI's ranks exit at once (status 14), and the run folder
    tells. Either way srun ends the step within SLURM's KillWait."""
    c = cluster(2, slurm=True)
    out = str(tmp_path / "run")
    over_ofi = cluster_tool.KEEP_SURVIVORS["mpich"][0] if c.mpi == "mpich" else None
    plugin = "pmi2" if c.mpi == "mpich" else "pmix"
    srun = ["srun", "-N", "2", "--ntasks-per-node=1", f"--mpi={plugin}", sys.executable, *TRAIN]
    srun += ["--epochs", "50", "--out", out]
    job = subprocess.Popen(
        c.on("node0", srun),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=c.login_env(over_ofi),
        text=True,
        start_new_session=True,
    )
    wait_for_a_checkpoint(job, out)
    c.kill("node1")  # its slurmd and the rank
    killed = time.monotonic()
    result = c.finish(job, timeout=90)
    assert not result.timed_out, f"hung:\n{result.output}"
    assert time.monotonic() - killed < HANG_TIMEOUT + 30, result.output
    assert "epoch 50/50" not in result.output
    code, line = check(c, out)
    assert code == 1, line
    if c.mpi == "mpich":
        assert "Not answering: rank 1 on node1" in result.output, result.output
        assert "aborted after epoch" in line and "Not answering: rank 1 on node1" in line, line
    else:
        assert "did not finish: stopped after epoch" in line, line
    assert_intact_and_resumable(c, out)
