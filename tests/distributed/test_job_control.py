"""No MPI job outlives its reason to run: signals end every process, a stopped rank ends the job.

These tests start real jobs (``minidl train --workers 2`` and ``mpiexec -n 2
minidl train``), act on them from outside while they train, and then look
for leftovers by process group and command line. Whatever happens, every
process they started is killed at the end.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl_app.launch import mpiexec_command

pytestmark = pytest.mark.mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

TRAIN = [
    "-m",
    "minidl",
    "train",
    "--model",
    "lenet5",
    "--subset",
    "30000",
    "--epochs",
    "20",
    "--no-progress",
]


def processes():
    """{pid: (process group, command line, environment)} of every process we may inspect."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                group = int(f.read().rsplit(")", 1)[1].split()[2])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        found[int(name)] = (group, command, environ)
    return found


def ranks_of(marker):
    """{rank: pid} of the training processes whose command line holds ``marker``."""
    ranks = {}
    for pid, (_, command, environ) in processes().items():
        if marker in command and "--dist" in command and "mpiexec" not in command:
            for item in environ:
                if item.startswith((b"PMI_RANK=", b"OMPI_COMM_WORLD_RANK=")):
                    ranks[int(item.split(b"=")[1])] = pid
    return ranks


def heartbeating(pid):
    """True when process ``pid`` holds a UDP socket, which only its heartbeat opens (MPI's
    own sockets are TCP and Unix): it is past start-up, and its peers can hear it."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    sockets = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    udp = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        if os.path.exists(table):
            with open(table) as f:
                udp |= {line.split()[9] for line in f.readlines()[1:]}
    return bool(sockets & udp)


def wait_for_ranks(job, marker, count, timeout=120):
    """Wait until ``count`` ranks are running past start-up (heartbeats going, on a loaded
    machine too) and have trained for a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert job.poll() is None, job.communicate()[0]
        ranks = ranks_of(marker)
        if len(ranks) == count and all(heartbeating(pid) for pid in ranks.values()):
            time.sleep(2)  # a few heartbeats heard, into the training steps
            return ranks
        time.sleep(0.2)
    raise AssertionError(f"the ranks of {marker} did not start within {timeout} s")


def leftovers(marker, groups):
    """Processes still alive that belong to the job (by command line or process group)."""
    return {
        pid: command
        for pid, (group, command, _) in processes().items()
        if pid != os.getpid() and (marker in command or group in groups)
    }


def assert_nothing_left(marker, groups, within):
    """Every process of the job is gone within ``within`` seconds."""
    deadline = time.monotonic() + within
    while leftovers(marker, groups) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers(marker, groups)


def kill_everything(marker, groups):
    for pid in leftovers(marker, groups):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def start(args, env):
    return subprocess.Popen(
        [sys.executable, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_to_train_workers_ends_every_process_of_the_job(tmp_path, job_env, signum):
    """SIGTERM and SIGINT are forwarded to the job's process group; SIGKILL cannot be caught,
    but the kernel then tells mpiexec (its parent-death signal), which ends the ranks."""
    marker = str(tmp_path / "run")
    job = start([*TRAIN, "--workers", "2", "--out", marker], job_env)
    groups = set()
    try:
        ranks = wait_for_ranks(job, marker, 2)
        groups = {processes()[pid][0] for pid in ranks.values()}
        assert job.pid not in groups  # the workers run in a group of their own
        job.send_signal(signum)
        output, _ = job.communicate(timeout=60)
        if signum != signal.SIGKILL:
            assert job.returncode == 128 + signum, output
            assert f"stopped by {signal.Signals(signum).name}" in output
        assert_nothing_left(marker, groups, within=30)
    finally:
        job.kill()
        kill_everything(marker, groups)


def test_a_stopped_rank_does_not_hang_the_job(tmp_path, job_env):
    """SIGSTOP one rank: the other waits in its next allreduce; its watchdog ends the job."""
    marker = str(tmp_path / "run")
    prefix, mpi_env = mpiexec_command(2)
    job = subprocess.Popen(
        [
            *prefix,
            sys.executable,
            *TRAIN,
            "--dist",
            "sync",
            "--threads",
            "1",
            "--hang-timeout",
            "5",
            "--out",
            marker,
        ],
        env={**job_env, **mpi_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    groups = {job.pid}
    try:
        ranks = wait_for_ranks(job, marker, 2)
        os.kill(ranks[1], signal.SIGSTOP)
        stopped = time.monotonic()
        output, _ = job.communicate(timeout=90)
        waited = time.monotonic() - stopped
        assert job.returncode != 0, output
        assert "made no progress for" in output and "--hang-timeout" in output
        assert "Not answering: rank 1 on " in output, output  # its heartbeats stopped too
        assert waited < 60, f"the job took {waited:.0f} s to end"
        stopped_rank = processes().get(ranks[1])
        assert not (stopped_rank and stopped_rank[1]), "the stopped rank outlived its job"
        assert_nothing_left(marker, groups, within=10)
    finally:
        job.kill()
        kill_everything(marker, groups)


def test_a_job_that_ignores_the_forwarded_signal_is_killed_after_a_grace_period(tmp_path, job_env):
    """A rank that swallows SIGINT (a KeyboardInterrupt raised in a ``__del__`` is only
    printed) would keep the job alive: the launcher ends the group once ``GRACE_S`` is up."""
    marker = str(tmp_path / "stubborn")
    rank = (
        "import signal, time; "
        "[signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "
        f"time.sleep(600)  # {marker}"
    )
    launcher = (
        "import sys; from minidl_app.launch import run_workers; "
        f"sys.exit(run_workers([sys.executable, '-c', {rank!r}], {{}}))"
    )
    job = start(["-c", launcher], job_env)
    groups = set()
    try:
        deadline = time.monotonic() + 30
        while not groups and time.monotonic() < deadline:  # the rank, in a group of its own
            groups = {processes()[pid][0] for pid in leftovers(marker, set())} - {job.pid}
            time.sleep(0.1)
        assert groups, "the stubborn rank did not start"
        job.send_signal(signal.SIGINT)
        output, _ = job.communicate(timeout=60)
        assert job.returncode == 128 + signal.SIGINT, output
        assert "stopped by SIGINT" in output
        assert_nothing_left(marker, groups, within=5)
    finally:
        job.kill()
        kill_everything(marker, groups)
