"""`mpiexec -n 2 minidl train --model alexnet --dataset folder --dist sync`: the image folder
sharded over ranks, global top-1/top-5 metrics, and an unreadable image ending the job."""

import json

import pytest

from tests.data.conftest import write_image_folder

pytestmark = pytest.mark.mpi

SMALL = ["--model", "alexnet", "--variant", "torchvision", "--dataset", "folder",
         "--crop-size", "63", "--resize", "72", "--epochs", "1", "--no-progress",
         "--data-workers", "2"]  # fmt: skip


@pytest.fixture
def folder(tmp_path):
    pytest.importorskip("PIL")
    root = tmp_path / "images"
    return root, write_image_folder(root)


def test_two_ranks_share_the_folder_and_report_global_metrics(mpi_run, folder, tmp_path):
    root, made = folder
    out = tmp_path / "run"
    result = mpi_run(
        2, "-m", "minidl", "train", *SMALL, "--data-dir", str(root), "--dist", "sync",
        "--batch-size", "3", "--skip-unreadable", "--out", str(out),
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")}, timeout=240,
    )  # fmt: skip
    assert not result.timed_out and result.returncode == 0, result.output
    assert result.output.count("epoch 1/1") == 1  # only rank 0 reports
    (record,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
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
    first = mpi_run(1, *common, "--skip-unreadable", "--out", str(tmp_path / "a"), env=env,
                    timeout=240)  # fmt: skip
    assert first.returncode == 0, first.output
    result = mpi_run(2, *common, "--dist", "sync", "--out", str(tmp_path / "b"), env=env,
                     timeout=240)  # fmt: skip
    assert not result.timed_out, f"hung:\n{result.output}"
    assert result.returncode != 0
    assert f"{made['corrupt']}: cannot decode the image" in result.output


def test_rank_zero_alone_measures_the_colour_statistics(run_checks, folder, tmp_path):
    root, _ = folder
    env = {"FOLDER": str(root), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    run_checks(2, "colour_stats_once", script="folder_checks.py", env=env, timeout=120)
