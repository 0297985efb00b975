"""``mpiexec minidl train``'s ``"memory"`` record: every rank's measured bytes equal what
``dist.memory`` predicts for the run's ``config.json``: data parallelism and ZeRO's stages on
3 ranks (uneven shards), tensor parallelism on 2, and a pipeline's stages (parameters,
gradients and state; its activations are not measured)."""

import json
import os

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.dist.memory import predict_run
from minidl_app.metrics import read_metrics

pytestmark = pytest.mark.mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

STEPS = ["--subset", "96", "--test-subset", "48", "--batch-size", "16", "--epochs", "1"]
COMMON = ["--model", "lenet5", "--optimizer", "adam", "--no-progress", *STEPS]


def train_mpi(mpi_run, tmp_path, nprocs, *flags):
    out = str(tmp_path / "run")
    command = ["-m", "minidl", "train", *COMMON, *flags, "--out", out]
    result = mpi_run(nprocs, *command, timeout=180)
    assert not result.timed_out and result.returncode == 0, result.output
    records = read_metrics(os.path.join(out, "metrics.jsonl"))
    (record,) = [r for r in records if r["kind"] == "memory"]
    with open(os.path.join(out, "config.json")) as f:
        return record, predict_run(json.load(f))


def measured_is_predicted(record, predicted, kinds):
    for kind in kinds:
        assert record[kind] == [getattr(r.memory, kind) for r in predicted], kind


@pytest.mark.parametrize("zero", ["0", "1", "2", "3"])
def test_three_replicas_hold_what_zero_predicts(mpi_run, tmp_path, zero):
    record, predicted = train_mpi(mpi_run, tmp_path, 3, "--dist", "sync", "--zero", zero)
    measured_is_predicted(record, predicted, ("grads", "state", "activations"))
    # stage 3's gathered layer lives while the layer runs, between the sampled points
    gathered = 4 * (120 * 400 + 120) if zero == "3" else 0  # the largest layer, Linear(400, 120)
    assert record["params"] == [r.memory.params - gathered for r in predicted]
    if zero != "0":  # 61,706 parameters: 20,569 + 20,569 + 20,568
        assert record["state"] == [2 * 4 * share for share in (20_569, 20_569, 20_568)]


def test_tensor_parallel_ranks_hold_their_blocks(mpi_run, tmp_path):
    record, predicted = train_mpi(mpi_run, tmp_path, 2, "--grid", "tp=2")
    measured_is_predicted(record, predicted, ("params", "grads", "state", "activations"))


def test_pipeline_ranks_hold_their_stages(mpi_run, tmp_path):
    flags = ["--grid", "pp=2", "--micro-batches", "2", "--stages", "layers"]
    record, predicted = train_mpi(mpi_run, tmp_path, 2, *flags)
    measured_is_predicted(record, predicted, ("params", "grads", "state"))
    assert record["activations"] == [None, None] and "not measured" in record["note"]
