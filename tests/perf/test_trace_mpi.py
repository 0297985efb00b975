"""A timeline of a real multi-rank run: every rank's events in one trace.json."""

import json
import os
import pathlib

import pytest

from minidl_app import launch

SCRIPT = pathlib.Path(__file__).with_name("mpi_trace_run.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def mpi_run(nprocs, args):
    """Run ``python *args`` on ``nprocs`` ranks with this checkout importable; fail on errors."""
    reason = launch.mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
    }
    run = launch.run_mpi(nprocs, args, timeout=120, env=env)
    assert not run.timed_out and run.returncode == 0, run.output
    return run


@pytest.mark.mpi
def test_ranks_write_one_merged_trace(tmp_path):
    mpi_run(3, [str(SCRIPT), str(tmp_path)])
    assert sorted(os.listdir(tmp_path)) == ["trace.json"]  # the parts are merged away
    with open(tmp_path / "trace.json") as f:
        events = json.load(f)["traceEvents"]
    for cat in ("forward", "comm", "wait"):
        assert {e["pid"] for e in events if e.get("cat") == cat} == {0, 1, 2}
    assert min(e["ts"] for e in events if "ts" in e) == 0


@pytest.mark.mpi
def test_distributed_training_trace_shows_compute_and_communication_of_both_ranks(tmp_path):
    from minidl.data import DatasetNotFoundError, FashionMNIST

    try:
        FashionMNIST(train=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST not found (make data)")
    mpi_run(
        2,
        [
            "-m",
            "minidl",
            "train",
            "--dist",
            "sync",
            "--model",
            "lenet5",
            "--subset",
            "256",
            "--batch-size",
            "32",
            "--epochs",
            "1",
            "--conv-algo",
            "im2col",
            "--no-progress",
            "--out",
            str(tmp_path),
            "--trace",
        ],
    )
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("trace")) == ["trace.json"]
    with open(tmp_path / "trace.json") as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    for cat in ("forward", "backward", "update", "comm", "wait"):
        assert {e["pid"] for e in events if e["cat"] == cat} == {0, 1}, cat
    steps = [e for e in events if e["name"] == "optimizer.step" and e["pid"] == 0]
    assert len(steps) == 4  # 256 images / (2 ranks x 32)
    buckets = [
        e
        for e in events
        if e["cat"] == "comm" and e["pid"] == 0 and e["ts"] < steps[0]["ts"] + steps[0]["dur"]
    ]
    assert buckets and all(e["args"]["bytes"] > 0 for e in buckets)
