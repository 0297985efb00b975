"""A run folder has one writer, holds one run, and only minidl's own temporary files go.

The lock is raced by two processes a few hundred times (each round well
under a millisecond of work); whole training runs race a few times, forked
from this process so that each takes about a second; one command-line test
runs a real ``minidl train`` process and kills it.
"""

import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback

import pytest

import minidl as md
from minidl.atomic import atomic_write, remove_stale_parts
from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.checkpoint import load_checkpoint, save_checkpoint
from minidl_app import rundir as rundir_module
from minidl_app.cli import main
from minidl_app.rundir import LOCK_NAME, FolderLock, RunFolderBusy

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

SMALL = ["--model", "mlp", "--subset", "256", "--batch-size", "32", "--no-progress"]
LOCK_ROUNDS = 300
TRAIN_ROUNDS = 4
FORK = multiprocessing.get_context("fork")
SOURCE = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(md.__file__))}


def train(capsys, *args):
    """``minidl train`` in process; returns (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(["train", *args])
    out, err = capsys.readouterr()
    return code, out, err


def listing(folder):
    """Every file of ``folder`` with its bytes."""
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def held_by_me():
    return f"PID {os.getpid()} on host {socket.gethostname()}"


def stop(processes):
    """Kill what is still running of ``processes`` (multiprocessing or subprocess)."""
    for p in processes:
        if isinstance(p, subprocess.Popen):
            if p.poll() is None:
                p.kill()
                p.wait()
        elif p.is_alive():
            p.kill()
            p.join()


# ---- the lock ---------------------------------------------------------------------------------


def test_a_held_folder_is_refused_with_the_holders_pid_and_host(tmp_path):
    with FolderLock(tmp_path) as first:
        assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
        with pytest.raises(RunFolderBusy, match=re.escape(held_by_me())):
            FolderLock(tmp_path).acquire()
        assert first.held
    assert not (tmp_path / LOCK_NAME).exists()  # given up: the file goes
    with FolderLock(tmp_path):  # and the folder can be taken again
        pass


def _contend(folder, barrier, rounds, results):
    """One of two processes: each round, take the lock, check nobody else has it, give it up."""
    owner = os.path.join(folder, "owner")
    log = []
    for _ in range(rounds):
        barrier.wait()
        lock = FolderLock(folder)
        try:
            lock.acquire()
        except RunFolderBusy as exc:
            log.append(str(exc))
            continue
        try:  # exclusive creation fails if the other process holds the lock at the same time
            os.close(os.open(owner, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            time.sleep(0.0005)
            os.unlink(owner)
            log.append("won")
        except FileExistsError:
            log.append("both held it")
        finally:
            lock.release()
    results.put((os.getpid(), log))


def test_two_processes_racing_for_a_folder_never_hold_it_together(tmp_path):
    barrier, results = FORK.Barrier(2, timeout=30), FORK.Queue()
    procs = [
        FORK.Process(target=_contend, args=(str(tmp_path), barrier, LOCK_ROUNDS, results))
        for _ in range(2)
    ]
    try:
        for p in procs:
            p.start()
        logs = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
    finally:
        stop(procs)
    (a, log_a), (b, log_b) = logs.items()
    assert "both held it" not in log_a + log_b
    refused = 0
    for mine, theirs, other in ((log_a, log_b, b), (log_b, log_a, a)):
        for entry, their_entry in zip(mine, theirs):
            if entry != "won":
                refused += 1
                assert their_entry == "won"  # refused only while the other held it
                assert f"PID {other} on host {socket.gethostname()}" in entry
    assert refused > 0  # the rounds did race
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_whose_holder_died_is_free(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from minidl_app.rundir import FolderLock; "
            "FolderLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(600)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=SOURCE,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(RunFolderBusy, match=f"PID {holder.pid} on host"):
            FolderLock(tmp_path).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with FolderLock(tmp_path):  # its stale lock file is left, unlocked
            pass
    finally:
        stop([holder])


# ---- temporary files --------------------------------------------------------------------------


def test_temporary_files_are_named_per_process_and_only_they_are_removed(tmp_path):
    with atomic_write(tmp_path / "checkpoint.npz") as f:
        f.write(b"x")
        (tmp,) = [n for n in os.listdir(tmp_path) if n.endswith(".part")]
    assert re.fullmatch(rf"\.checkpoint\.npz\.minidl-{os.getpid()}-\w+\.part", tmp)
    mine = tmp_path / ".metrics.jsonl.minidl-4242-k2j4h1xz.part"
    users = [".movie.mkv.part", ".checkpoint.npz.x1y2z3.part", ".a.minidl-x.part", "b.part"]
    for name in [mine.name, *users]:
        (tmp_path / name).write_bytes(b"data")
    assert remove_stale_parts(tmp_path) == [str(mine)]
    assert sorted(os.listdir(tmp_path)) == sorted(["checkpoint.npz", *users])


def test_overwrite_keeps_the_users_own_files(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(capsys, *SMALL, "--epochs", "1", "--out", str(run))[0] == 0
    (run / ".movie.mkv.part").write_bytes(b"a download")
    (run / "notes.txt").write_text("mine")
    (run / ".checkpoint.npz.minidl-4242-k2j4h1xz.part").write_bytes(b"half a checkpoint")
    code, _, err = train(capsys, *SMALL, "--epochs", "1", "--out", str(run), "--overwrite")
    assert code == 0, err
    kept = ".movie.mkv.part checkpoint.npz config.json curves.png metrics.jsonl notes.txt"
    assert sorted(os.listdir(run)) == kept.split()


# ---- one writer -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["new", "overwrite", "resume"])
def test_a_locked_folder_is_refused_before_anything_is_written(tmp_path, capsys, how):
    """Each of them would write the folder were it not locked."""
    run = tmp_path / "run"
    assert train(capsys, *SMALL, "--epochs", "1", "--out", str(run))[0] == 0
    if how == "new":
        run = tmp_path / "fresh"
        run.mkdir()
    args = {
        "new": [*SMALL, "--out", str(run)],
        "overwrite": [*SMALL, "--out", str(run), "--overwrite"],
        "resume": ["--no-progress", "--resume", str(run / "checkpoint.npz")],
    }[how]
    with FolderLock(run):
        before = listing(run)
        code, _, err = train(capsys, *args, "--epochs", "2")
        assert listing(run) == before
    assert code == 1
    assert f"minidl train: error: {run} is being written by another run ({held_by_me()})" in err
    assert "one writer at a time" in err and "choose another --out" in err


def _fit(folder, seed, epochs=1, resume=None):
    """A forked child: one small run in ``folder``; exits 0 (done), 1 (refused), 2 (other)."""
    rundir_module.plot_curves = lambda *args: None  # the plot is most of a small run's time
    config = md.train.TrainConfig(
        model="mlp",
        subset=64,
        batch_size=32,
        epochs=epochs,
        seed=seed,
        threads=1,
        progress=False,
        out=folder,
    )
    sys.stdout = open(os.devnull, "w")
    try:
        md.train.fit(config, resume=resume)
    except (RunFolderBusy, rundir_module.RunDirectoryError):
        os._exit(1)
    except BaseException:
        traceback.print_exc()
        os._exit(2)
    os._exit(0)


def race(*runs):
    """Start the forked ``runs`` ((args) of ``_fit``) together; their exit statuses."""
    procs = [FORK.Process(target=_fit, args=args) for args in runs]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        return [p.exitcode for p in procs]
    finally:
        stop(procs)


def one_consistent_run(run):
    """The epochs ``run`` recorded, after checking that its files are of one run."""
    config = json.loads((run / "config.json").read_text())
    checkpoint = load_checkpoint(str(run / "checkpoint.npz"))
    assert checkpoint.meta["run_id"] == config["run_id"]
    assert checkpoint.meta["config"]["seed"] == config["seed"]
    records = map(json.loads, open(run / "metrics.jsonl"))
    epochs = [r["epoch"] for r in records if r["kind"] == "epoch"]
    assert epochs[-1] == checkpoint.meta["epoch"] and epochs == sorted(set(epochs))
    assert not [n for n in os.listdir(run) if n.endswith(".part") or n == LOCK_NAME]
    return epochs


def test_two_new_runs_started_together_leave_one_run(tmp_path):
    for round_ in range(TRAIN_ROUNDS):
        run = tmp_path / f"run{round_}"
        codes = race((str(run), 1), (str(run), 2))
        assert sorted(codes) == [0, 1], codes
        assert one_consistent_run(run) == [1]


def test_a_resume_racing_its_own_run_is_refused_or_follows_it(tmp_path):
    for round_ in range(TRAIN_ROUNDS):
        run = tmp_path / f"run{round_}"
        assert race((str(run), 0)) == [0]
        ckpt = str(run / "checkpoint.npz")
        codes = race((str(run), 0, 3, ckpt), (str(run), 0, 2, ckpt))
        assert 0 in codes and set(codes) <= {0, 1}, codes
        epochs = one_consistent_run(run)
        assert epochs == list(range(1, epochs[-1] + 1))


def test_a_running_command_keeps_its_folder_until_it_is_killed(tmp_path, capsys):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "minidl", "train", *SMALL, "--epochs", "500", "--out"]
    writer = subprocess.Popen(
        [*command, str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=SOURCE
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoint.npz").exists():
            assert writer.poll() is None, writer.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        holder = f"PID {writer.pid} on host {socket.gethostname()}"
        for args in (
            ["--no-progress", "--epochs", "600", "--resume", str(run / "checkpoint.npz")],
            [*SMALL, "--epochs", "1", "--out", str(run), "--overwrite"],
        ):
            code, _, err = train(capsys, *args)
            assert code == 1 and holder in err, err
        writer.kill()
        writer.wait(timeout=30)
    finally:
        stop([writer])
    epoch = load_checkpoint(str(run / "checkpoint.npz")).meta["epoch"]
    code, _, err = train(
        capsys, "--no-progress", "--epochs", str(epoch + 1), "--resume", str(run / "checkpoint.npz")
    )
    assert code == 0, err
    assert one_consistent_run(run)[-1] == epoch + 1  # epoch may lack its record: killed


def test_workers_refuse_a_locked_folder_and_the_whole_job_ends(tmp_path):
    """Only rank 0 takes the lock (the launcher does not): its refusal ends every rank."""
    from minidl_app.launch import mpi_unavailable_reason

    if mpi_unavailable_reason():
        pytest.skip(mpi_unavailable_reason())
    run = tmp_path / "run"
    run.mkdir()
    command = [sys.executable, "-m", "minidl", "train", *SMALL, "--workers", "2", "--out"]
    lock = FolderLock(run).acquire()
    job = subprocess.Popen(
        [*command, str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=SOURCE,
        start_new_session=True,
    )
    try:
        _, err = job.communicate(timeout=300)
        assert os.listdir(run) == [LOCK_NAME]
    finally:
        lock.release()
        if job.poll() is None:  # mpiexec and its ranks: the whole process group
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 1, err
    assert f"{run} is being written by another run ({held_by_me()})" in err


# ---- resume only into the checkpoint's own run ------------------------------------------------


def test_a_copied_checkpoint_needs_out_and_never_touches_the_other_run(tmp_path, capsys):
    base, other, new = tmp_path / "base", tmp_path / "B", tmp_path / "C"
    assert train(capsys, *SMALL, "--epochs", "1", "--out", str(base))[0] == 0
    assert train(capsys, *SMALL, "--epochs", "1", "--out", str(other), "--seed", "3")[0] == 0
    (other / "x.npz").write_bytes((base / "checkpoint.npz").read_bytes())
    before = listing(other)
    copied = str(other / "x.npz")
    code, _, err = train(capsys, "--no-progress", "--epochs", "2", "--resume", copied)
    assert code == 1
    assert (
        f"--resume {copied}: the run in {other} is not this checkpoint's (its config.json is of "
        "another run); continuing there would mix two runs in one folder: pass --out with the "
        "folder the continued run goes to"
    ) in err
    assert listing(other) == before
    code, _, err = train(
        capsys, "--no-progress", "--epochs", "2", "--resume", copied, "--out", str(new)
    )
    assert code == 0, err
    assert one_consistent_run(new) == [2]  # a run of its own, from the copy's epoch 1
    base_id = json.loads((base / "config.json").read_text())["run_id"]
    assert json.loads((new / "config.json").read_text())["run_id"] != base_id
    code, _, err = train(
        capsys, "--no-progress", "--epochs", "3", "--resume", str(new / "checkpoint.npz")
    )
    assert code == 0, err  # and that run continues in its own folder
    assert one_consistent_run(new) == [2, 3]


def test_a_checkpoint_in_a_folder_without_config_needs_out(tmp_path, capsys):
    base = tmp_path / "base"
    assert train(capsys, *SMALL, "--epochs", "1", "--out", str(base))[0] == 0
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "checkpoint.npz").write_bytes((base / "checkpoint.npz").read_bytes())
    code, _, err = train(
        capsys,
        "--no-progress",
        "--epochs",
        "2",
        "--resume",
        str(tmp_path / "bare" / "checkpoint.npz"),
    )
    assert code == 1 and "(it has no config.json)" in err and "pass --out" in err
    assert os.listdir(tmp_path / "bare") == ["checkpoint.npz"]


def test_a_run_from_before_run_ids_still_resumes_in_its_folder(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(capsys, *SMALL, "--epochs", "1", "--out", str(run))[0] == 0
    config = json.loads((run / "config.json").read_text())
    del config["run_id"]
    (run / "config.json").write_text(json.dumps(config))
    ckpt = load_checkpoint(str(run / "checkpoint.npz"))
    meta = {k: v for k, v in ckpt.meta.items() if k not in ("run_id", "optimizer_params")}
    model = md.models.mlp(num_classes=10)
    model.load_state_dict(ckpt.model_state)
    save_checkpoint(str(run / "checkpoint.npz"), model, None, **meta)
    code, _, err = train(
        capsys, "--no-progress", "--epochs", "2", "--resume", str(run / "checkpoint.npz")
    )
    assert code == 0, err
    records = [json.loads(line) for line in open(run / "metrics.jsonl")]
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]


# ---- a run that never finished an epoch -------------------------------------------------------


def test_a_folder_with_only_config_is_started_again_by_the_same_command(tmp_path, capsys):
    run = tmp_path / "run"
    (run).mkdir()
    (run / "config.json").write_text(json.dumps({"run_id": "a-run-killed-early", "seed": 5}))
    code, _, err = train(capsys, *SMALL, "--epochs", "1", "--out", str(run))
    assert code == 0, err
    assert one_consistent_run(run) == [1]
    assert json.loads((run / "config.json").read_text())["seed"] == 0


def test_a_run_without_a_checkpoint_is_not_told_to_resume_one(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text("")
    code, _, err = train(capsys, *SMALL, "--epochs", "1", "--out", str(run))
    assert code == 1
    assert (
        f"{run} already holds a run (config.json, metrics.jsonl); replace it with --overwrite, "
        "or choose another --out"
    ) in err
    assert "--resume" not in err
