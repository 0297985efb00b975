"""`mpiexec minidl train --dist bsp|ssp|asp|avg|easgd`, `--compress`, and `minidl report`."""

import json
import os

import numpy as np
import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.checkpoint import load_checkpoint
from minidl_app.cli import main

pytestmark = pytest.mark.mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

COMMON = [
    "--model",
    "lenet5",
    "--subset",
    "640",
    "--conv-algo",
    "im2col",
    "--no-progress",
    "--batch-size",
    "32",
    "--epochs",
    "1",
]


def train_mpi(mpi_run, nprocs, *args, ok=True):
    result = mpi_run(nprocs, "-m", "minidl", "train", *COMMON, *args, timeout=180)
    assert not result.timed_out, result.output
    assert (result.returncode == 0) == ok, result.output
    return result


def records(run_dir, kind):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


def test_bsp_on_a_parameter_server_equals_sync_allreduce_bit_for_bit(mpi_run, tmp_path):
    """Plain SGD: 1 server + 2 workers (bsp) and 2 ranks (sync) reach identical weights."""
    runs = {mode: str(tmp_path / mode) for mode in ("sync", "bsp")}
    train_mpi(mpi_run, 2, "--dist", "sync", "--optimizer", "sgd", "--out", runs["sync"])
    train_mpi(mpi_run, 3, "--dist", "bsp", "--optimizer", "sgd", "--out", runs["bsp"])
    a, b = (
        load_checkpoint(os.path.join(runs[m], "checkpoint.npz")).model_state
        for m in ("sync", "bsp")
    )
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    assert (
        records(runs["bsp"], "epoch")[0]["test_acc"]
        == records(runs["sync"], "epoch")[0]["test_acc"]
    )


def test_consistency_models_write_their_telemetry_and_the_report_draws_it(
    mpi_run, tmp_path, capsys
):
    ssp, asp, avg = (str(tmp_path / name) for name in ("ssp", "asp", "avg"))
    train_mpi(mpi_run, 3, "--dist", "ssp:1", "--straggler", "2:3", "--out", ssp)
    train_mpi(
        mpi_run,
        4,
        "--dist",
        "asp",
        "--servers",
        "2",
        "--compress",
        "qsgd:4",
        "--jitter",
        "0.001",
        "--out",
        asp,
    )
    train_mpi(mpi_run, 2, "--dist", "avg:2", "--out", avg)
    (ssp_dist,) = records(ssp, "dist")
    assert ssp_dist["staleness"]["max"] <= 1 and ssp_dist["staleness"]["count"] == 20
    assert ssp_dist["gate_wait_s"][0] > 0 and ssp_dist["per_worker"]["slept_s"][1] > 0
    (asp_dist,) = records(asp, "dist")
    assert asp_dist["servers"] == 2 and sum(asp_dist["per_worker"]["gradients"]) == 20
    assert asp_dist["applied_gradients"] == 20
    # every push: a header of 40 bytes and the QSGD payload of each shard
    assert asp_dist["bytes_per_gradient"] < 0.2 * 4 * 61706
    (avg_dist,) = records(avg, "dist")
    assert (
        avg_dist["updates"] == 6
    )  # 10 steps per worker: averages after 2, 4, ..., 10, and the epoch's end
    assert main(["report", ssp, asp, avg]) == 0
    out = capsys.readouterr().out
    assert "staleness mean" in out and "ssp:1 straggler 2:3" in out
    assert os.path.getsize(os.path.join(ssp, "report.png")) > 10_000


def test_sync_with_topk_compression_records_its_bytes(mpi_run, tmp_path):
    out = str(tmp_path / "topk")
    train_mpi(mpi_run, 2, "--dist", "sync", "--compress", "topk:0.01", "--out", out)
    (record,) = records(out, "compression")
    assert record["payload_bytes_per_step"] == 8 * 618 and record["error_feedback"] is True
    assert record["steps"] == 10


@pytest.mark.parametrize(
    "nprocs,args,message",
    [
        (2, ["--dist", "bsp", "--servers", "2"], "needs at least 3 ranks"),
        (2, ["--dist", "sync", "--servers", "2"], "--servers applies to"),
        (3, ["--dist", "easgd", "--compress", "fp16"], "--compress applies to"),
        (3, ["--dist", "asp", "--straggler", "0:2"], "rank 0 is not a worker"),
        (2, ["--dist", "ssp:x"], "S must be a number"),
    ],
)
def test_bad_distributed_options_are_refused_with_the_fix(mpi_run, nprocs, args, message):
    result = train_mpi(mpi_run, nprocs, *args, ok=False)
    assert message in result.output
