"""``minidl train``'s ``"memory"`` record: what one process measured equals what
``dist.memory`` predicts for its ``config.json``; ``minidl report`` shows them side by side."""

import json
import os

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.dist.memory import predict_run
from minidl_app.cli import main
from minidl_app.metrics import read_metrics

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

STEPS = ["--subset", "96", "--test-subset", "50", "--batch-size", "32", "--epochs", "1"]
KINDS = ("params", "grads", "state", "activations")


def train(tmp_path, *flags):
    out = str(tmp_path / "run")
    assert main(["train", *STEPS, "--no-progress", *flags, "--out", out]) == 0
    return out


def memory_record(out):
    records = read_metrics(os.path.join(out, "metrics.jsonl"))
    (record,) = [r for r in records if r["kind"] == "memory"]
    with open(os.path.join(out, "config.json")) as f:
        return record, json.load(f)


@pytest.mark.parametrize(
    "flags",
    [
        ["--model", "lenet5", "--optimizer", "adam"],
        ["--model", "mlp", "--optimizer", "sgd", "--dtype", "float64"],
        ["--model", "lenet5", "--recompute", "3"],
    ],
)
def test_a_run_records_the_bytes_its_config_predicts(tmp_path, flags):
    record, config = memory_record(train(tmp_path, *flags))
    assert record["epoch"] == 1 and record["sampled_steps"] == 2
    (predicted,) = predict_run(config)
    for kind in KINDS:
        assert record[kind] == [getattr(predicted.memory, kind)], kind
    assert record["max_rss"][0] > sum(record[kind][0] for kind in KINDS)


def test_report_shows_measured_next_to_predicted(tmp_path, capsys):
    out = train(tmp_path, "--model", "lenet5")
    capsys.readouterr()
    assert main(["report", out]) == 0
    text = capsys.readouterr().out
    assert "single process" in text and "test acc %" in text  # the epoch table stays
    assert "memory per rank, epoch 1 (MiB, measured / predicted" in text
    row = next(line.split() for line in text.splitlines() if line.strip().startswith("0 "))
    assert row[1] == row[3] == "0.24"  # 61,706 float32 weights: 0.235 MiB, both sides
