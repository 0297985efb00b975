"""`minidl summary`, `profile`, `predict` and `train --trace` end to end, in-process."""

import json
import os

import pytest

from minidl_app.cli import main


def run(capsys, *argv):
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_summary_paper_convention(capsys):
    out = run(capsys, "summary", "--model", "lenet5", "--convention", "paper")
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert "61,706" in total and "665,832" in total and " 41 " in total
    assert "W/D = 665,832 / 41" in out


def test_summary_batch_and_input(capsys):
    out = run(capsys, "summary", "--model", "alexnet-original", "--batch", "2")
    assert "724,406,816 MACs per sample" in out and "1,448,813,632" in out
    with pytest.raises(SystemExit):
        main(["summary", "--model", "lenet5", "--input", "28x28x"])
    assert "is not of the form CxHxW" in capsys.readouterr().err


def test_profile_rows_and_coverage(capsys):
    out = run(capsys, "profile", "--model", "mlp", "--batch", "16", "--steps", "2", "--warmup", "1")
    assert "Linear" in out and "update" in out and "the rows cover" in out


def test_predict_with_a_roofline(capsys):
    out = run(
        capsys,
        "predict",
        "--model",
        "lenet5",
        "--batch",
        "64",
        "--nodes",
        "1,2,8,128",
        "--compute",
        "roofline",
        "--machine",
        "k80",
        "--scheme",
        "ring",
        "--compression",
        "4",
    )
    lines = out.splitlines()
    assert "compression 4" in lines[0] and "60.3 KiB" in lines[0]  # 61,706 * 4 B / 4
    assert any(line.split()[:2] == ["128", "0.5"] and "n > B" in line for line in lines)
    assert "- n <= B: 128 nodes exceed the global batch 64 (b = B/n < 1)" in lines


def test_predict_measures_each_local_batch_here(capsys):
    out = run(
        capsys,
        "predict",
        "--model",
        "mlp",
        "--batch",
        "16",
        "--nodes",
        "1,2,4",
        "--steps",
        "1",
        "--threads",
        "1",
    )
    assert "compute: measured here at b = 4, 8, 16" in out.splitlines()[0]
    assert out.splitlines()[-1].startswith("- per-sample efficiency at b=4 relative to b=16")
    with pytest.raises(SystemExit):
        main(["predict", "--nodes", "0,2"])
    assert "positive integers separated by commas" in capsys.readouterr().err


def test_train_trace_writes_a_timeline_of_every_layer(tmp_path, capsys):
    from minidl.data import DatasetNotFoundError, FashionMNIST

    try:
        FashionMNIST(train=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST not found (make data)")
    out_dir = str(tmp_path / "run")
    out = run(
        capsys,
        "train",
        "--model",
        "lenet5",
        "--subset",
        "128",
        "--batch-size",
        "64",
        "--epochs",
        "1",
        "--conv-algo",
        "im2col",
        "--no-progress",
        "--out",
        out_dir,
        "--trace",
    )
    path = os.path.join(out_dir, "trace.json")
    assert f"timeline: {path}" in out
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in events} == {0}
    backward = {e["name"] for e in events if e["cat"] == "backward"}
    assert {"0", "3", "7", "9", "11"} <= backward  # every layer with parameters
    assert sum(e["name"] == "optimizer.step" for e in events) == 2  # 128 images, batch 64
