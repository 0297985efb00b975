"""``--test-subset N``: each epoch is evaluated on the first N test images, and on them alone."""

import json
import os

import pytest

from minidl.data import DataLoader, DatasetNotFoundError, FashionMNIST
from minidl.train import TrainConfig
from minidl.train.checkpoint import load_checkpoint
from minidl.train.config import ConfigError, build_model
from minidl.train.loop import evaluate
from minidl_app.cli import main

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)


def test_the_epoch_record_is_the_evaluation_of_the_first_n_test_images(tmp_path):
    out = str(tmp_path / "run")
    argv = "train --model lenet5 --subset 96 --batch-size 32 --epochs 1 --test-subset 200".split()
    argv += ["--no-progress", "--out", out]
    assert main(argv) == 0
    with open(os.path.join(out, "metrics.jsonl")) as f:
        (record,) = [r for r in map(json.loads, f) if r["kind"] == "epoch"]
    assert record["test_images"] == 200
    ckpt = load_checkpoint(os.path.join(out, "checkpoint.npz"))
    first = FashionMNIST(train=False).first(200)
    model = build_model(TrainConfig.from_record(ckpt.training_config()), first)
    model.load_state_dict(ckpt.model_state)
    oracle = evaluate(model, DataLoader(first, 1000), 10)
    assert record["test_loss"] == pytest.approx(oracle["loss"], rel=1e-6)
    assert record["test_acc"] == oracle["acc"]


def test_a_test_subset_below_one_is_refused():
    with pytest.raises(ConfigError, match="test_subset 0: must be an integer > 0"):
        TrainConfig(test_subset=0).check()
