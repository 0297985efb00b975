"""``minidl report --check``: finished, aborted (minidl's own record) or stopped from outside."""

import json
import os

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.dist.job import job_aborted, when_aborted
from minidl_app.cli import main
from minidl_app.metrics import read_metrics
from minidl_app.rundir import RunDirectory, run_status


def write_run(path, epochs, done, tail=""):
    """A run folder as ``minidl train`` leaves it: ``done`` epoch records of ``epochs``."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"run_id": "r", "epochs": epochs}, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps({"kind": "epoch", "epoch": e}) + "\n" for e in range(1, done + 1))
        f.write(tail)


def test_a_run_stopped_from_outside_is_told_from_a_finished_one(tmp_path, capsys):
    write_run(tmp_path / "done", 3, 3)
    write_run(tmp_path / "cut", 3, 2, tail='{"kind": "epo')  # killed while writing
    assert run_status(tmp_path / "done") == (True, f"{tmp_path / 'done'}: finished, 3 epochs")
    finished, line = run_status(tmp_path / "cut")
    assert not finished and "did not finish: stopped after epoch 2 of 3" in line
    assert "no checkpoint was written" in line
    (tmp_path / "cut" / "checkpoint.npz").write_bytes(b"")
    assert f"resume {tmp_path / 'cut' / 'checkpoint.npz'}" in run_status(tmp_path / "cut")[1]
    assert main(["report", "--check", str(tmp_path / "done")]) == 0
    assert main(["report", "--check", str(tmp_path / "done"), str(tmp_path / "cut")]) == 1
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert not run_status(tmp_path / "nothing")[0]


def test_an_abort_is_recorded_while_asked_and_dropped_when_the_run_resumes(tmp_path):
    write_run(tmp_path, 3, 2)
    run_dir = RunDirectory(tmp_path)
    run_dir.open()
    forget = when_aborted(lambda reason: run_dir.record_abort(2, reason))
    job_aborted("rank 1 on node1 stopped answering")
    forget()
    job_aborted("not recorded: nothing asks any more")
    finished, line = run_status(tmp_path)
    assert not finished
    assert line == f"{tmp_path}: aborted after epoch 2 of 3: rank 1 on node1 stopped answering"
    metrics = os.path.join(tmp_path, "metrics.jsonl")
    assert [r["kind"] for r in read_metrics(metrics)] == ["epoch", "epoch", "aborted"]
    run_dir.resume("ckpt", 2, {"epochs": 3}, "r")
    assert [r["kind"] for r in read_metrics(metrics)] == ["epoch", "epoch"]
    run_dir.close()


def test_report_tables_read_a_run_with_an_aborted_record(tmp_path, capsys):
    try:
        FashionMNIST(train=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST not found (make data)")
    out = str(tmp_path / "run")
    argv = "train --model mlp --subset 256 --test-subset 200 --epochs 1 --batch-size 32".split()
    main([*argv, "--no-progress", "--out", out])
    run_dir = RunDirectory(out)
    run_dir.open()
    run_dir.record_abort(1, "a test")
    run_dir.close()
    capsys.readouterr()
    assert main(["report", out]) == 0
    assert (
        len([line for line in capsys.readouterr().out.splitlines() if line.strip()[:1] == "1"]) == 1
    )
