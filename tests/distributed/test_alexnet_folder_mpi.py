"""`mpiexec -n 2 minidl train --model alexnet --dataset folder --dist sync`: the image folder
sharded over ranks, global top-1/top-5 metrics, an unreadable image ending the job, the
colour statistics measured once, and two ranks equal to one process with the whole batch."""

import json

import numpy as np
import pytest

from minidl.train.checkpoint import load_checkpoint
from tests.data.conftest import write_image_folder

pytestmark = pytest.mark.mpi

SMALL = (
    "--model alexnet --variant torchvision --dataset folder --crop-size 63 --resize 72 "
    "--epochs 1 --no-progress --data-workers 2"
).split()


@pytest.fixture
def folder(tmp_path):
    pytest.importorskip("PIL")
    root = tmp_path / "images"
    return root, write_image_folder(root)


def test_two_ranks_share_the_folder_and_report_global_metrics(mpi_run, folder, tmp_path):
    root, made = folder
    out = tmp_path / "run"
    common = ["-m", "minidl", "train", *SMALL, "--data-dir", str(root)]
    options = "--dist sync --batch-size 3 --skip-unreadable".split()
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = mpi_run(2, *common, *options, "--out", str(out), env=env, timeout=240)
    assert not result.timed_out and result.returncode == 0, result.output
    assert result.output.count("epoch 1/1") == 1  # only rank 0 reports
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (record,) = [r for r in map(json.loads, lines) if r["kind"] == "epoch"]
    assert record["train_images"] == len(made["train"])  # every readable image once
    assert record["skipped_images"] == 1  # the corrupt one, counted over both ranks
    assert record["test_images"] == len(made["val"])
    assert record["test_top1_error"] == pytest.approx(1 - record["test_acc"])
    assert record["test_top5_error"] == 0.0  # three classes


def test_an_unreadable_image_on_one_rank_ends_the_job_naming_it(mpi_run, folder, tmp_path):
    root, made = folder
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    common = ["-m", "minidl", "train", *SMALL, "--data-dir", str(root), "--batch-size", "3"]
    # one process measures the colour statistics (skipping the bad file) and caches them, so
    # that below only the rank whose share holds the bad file meets it, mid-epoch
    first = mpi_run(
        1, *common, "--skip-unreadable", "--out", str(tmp_path / "a"), env=env, timeout=240
    )
    assert first.returncode == 0, first.output
    result = mpi_run(
        2, *common, "--dist", "sync", "--out", str(tmp_path / "b"), env=env, timeout=240
    )
    assert not result.timed_out, f"hung:\n{result.output}"
    assert result.returncode != 0
    assert f"{made['corrupt']}: cannot decode the image" in result.output


def test_rank_zero_alone_measures_the_colour_statistics(run_checks, folder, tmp_path):
    root, _ = folder
    env = {"FOLDER": str(root), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run_checks(2, "colour_stats_once", script="folder_checks.py", env=env, timeout=120)


@pytest.mark.parametrize("corrupt", [False, True])
def test_two_ranks_equal_one_process_with_the_whole_batch(mpi_run, tmp_path, corrupt):
    """float64, 3 or 4 steps of momentum SGD with crops, flips, colour noise and dropout all
    drawn per sample index, so the split does not matter; with a corrupt image skipped, the
    gradient is the mean over the images used."""
    pytest.importorskip("PIL")
    root = tmp_path / "images"
    made = write_image_folder(root, corrupt=corrupt)
    images = len(made["train"])  # the readable ones
    common = ["-m", "minidl", "train", *SMALL, "--data-dir", str(root)]
    common += ["--dtype", "float64", "--lr", "0.02"]
    common += ["--skip-unreadable"] if corrupt else ["--subset", "12"]
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = {}
    for ranks, extra in ((1, ["--batch-size", "4"]), (2, ["--batch-size", "2", "--dist", "sync"])):
        out = tmp_path / f"run{ranks}"
        result = mpi_run(ranks, *common, *extra, "--out", str(out), env=env, timeout=240)
        assert not result.timed_out and result.returncode == 0, result.output
        checkpoint = load_checkpoint(out / "checkpoint.npz")
        lines = (out / "metrics.jsonl").read_text().splitlines()
        record = [r for r in map(json.loads, lines) if r["kind"] == "epoch"][-1]
        runs[ranks] = (checkpoint.model_state, checkpoint.optimizer_state["state"], record)
    (one, one_velocity, one_record), (two, two_velocity, two_record) = runs[1], runs[2]
    assert one_record["train_images"] == two_record["train_images"] == (images if corrupt else 12)
    assert one_record.get("skipped_images") == two_record.get("skipped_images")
    assert two_record["train_loss"] == pytest.approx(one_record["train_loss"], rel=1e-12)
    assert sorted(one) == sorted(two)
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-11, atol=1e-14, err_msg=name)
    velocities = [
        (s["momentum_buffer"], t["momentum_buffer"]) for s, t in zip(one_velocity, two_velocity)
    ]
    assert all(np.abs(v).max() > 0 for v, _ in velocities)  # every layer was updated
    for v, w in velocities:
        np.testing.assert_allclose(w, v, rtol=1e-10, atol=1e-14)
