"""``mpiexec -n 4 minidl train --grid dp=2,tp=2``: the checkpoint of one process with twice the
batch, and a checkpoint that resumes on another grid."""

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

COMMON = ["--model", "lenet5", "--subset", "640", "--no-progress", "--dtype", "float64"]


def train_mpi(mpi_run, nprocs, *args):
    result = mpi_run(nprocs, "-m", "minidl", "train", *COMMON, *args, timeout=180)
    assert not result.timed_out and result.returncode == 0, result.output
    return result


def checkpoint(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz"))


def assert_serial_weights_and_momentum(run_dir, serial_dir):
    """The checkpoints of both runs hold the same weights and momentum, to 1e-10."""
    a, b = checkpoint(run_dir), checkpoint(serial_dir)
    for k in b.model_state:
        assert np.abs(a.model_state[k] - b.model_state[k]).max() <= 1e-10, k
    for mine, theirs in zip(a.optimizer_state["state"], b.optimizer_state["state"], strict=True):
        buf = "momentum_buffer"
        assert np.abs(mine[buf] - theirs[buf]).max() <= 1e-10


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    """One epoch of one process with batch 64: the run every grid is compared with."""
    out = str(tmp_path_factory.mktemp("serial"))
    assert main(["train", *COMMON, "--batch-size", "64", "--epochs", "1", "--out", out]) == 0
    return out


@pytest.mark.timeout(400)
def test_dp2_tp2_equals_one_process_with_twice_the_batch_and_resumes_on_tp2(
    mpi_run, tmp_path, serial_run
):
    """Epoch 1 on dp=2,tp=2 (32 per replica), epoch 2 resumed on tp=2 (64), against 2 epochs of
    one process with batch 64: the same weights and momentum under the serial names."""
    grid, straight = str(tmp_path / "grid"), str(tmp_path / "straight")
    train_mpi(
        mpi_run, 4, "--grid", "dp=2,tp=2", "--batch-size", "32", "--epochs", "1", "--out", grid
    )
    a, b = checkpoint(grid), checkpoint(serial_run)
    assert {k: v.shape for k, v in a.model_state.items()} == {
        k: v.shape for k, v in b.model_state.items()
    }
    for k in b.model_state:
        assert np.abs(a.model_state[k] - b.model_state[k]).max() <= 1e-10, k
    with open(os.path.join(grid, "metrics.jsonl")) as f:
        (counted,) = [r for r in map(json.loads, f) if r["kind"] == "grid"]
    assert counted["tp_bytes"] == counted["tp_predicted_bytes"] and min(counted["tp_bytes"]) > 0
    assert counted["dp_bytes"] == counted["dp_predicted_bytes"] and min(counted["dp_bytes"]) > 0
    resume = os.path.join(grid, "checkpoint.npz")
    train_mpi(
        mpi_run, 2, "--grid", "tp=2", "--batch-size", "64", "--epochs", "2", "--resume", resume
    )
    assert main(["train", *COMMON, "--batch-size", "64", "--epochs", "2", "--out", straight]) == 0
    a, b = checkpoint(grid), checkpoint(straight)
    for k in b.model_state:
        assert np.abs(a.model_state[k] - b.model_state[k]).max() <= 1e-10, k
    for mine, theirs in zip(a.optimizer_state["state"], b.optimizer_state["state"]):
        buf = "momentum_buffer"
        assert np.abs(mine[buf] - theirs[buf]).max() <= 1e-10


@pytest.mark.timeout(200)
def test_a_spatial_grid_trains_the_serial_weights(mpi_run, tmp_path, serial_run):
    """--grid spatial=2 on 2 ranks (each all 64 images, half of every image's rows)."""
    out = str(tmp_path / "spatial")
    train_mpi(
        mpi_run, 2, "--grid", "spatial=2", "--batch-size", "64", "--epochs", "1", "--out", out
    )
    a, b = checkpoint(out), checkpoint(serial_run)
    for k in b.model_state:
        assert np.abs(a.model_state[k] - b.model_state[k]).max() <= 1e-10, k


@pytest.mark.timeout(200)
def test_a_spatial_by_tp_grid_trains_the_serial_weights_and_counts_the_tp_bytes(
    mpi_run, tmp_path, serial_run
):
    """--grid spatial=2,tp=2 on 4 ranks: conv/pool on half of every image's rows, the fully
    connected layers split over tp; the checkpoint holds the serial weights and momentum."""
    out = str(tmp_path / "spatial_tp")
    train_mpi(
        mpi_run, 4, "--grid", "spatial=2,tp=2", "--batch-size", "64", "--epochs", "1", "--out", out
    )
    assert_serial_weights_and_momentum(out, serial_run)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        (counted,) = [r for r in map(json.loads, f) if r["kind"] == "grid"]
    assert counted["plan"][:7] == [""] * 7 and counted["plan"][7] == "column"
    assert counted["tp_bytes"] == counted["tp_predicted_bytes"] and min(counted["tp_bytes"]) > 0


@pytest.mark.timeout(200)
def test_a_pipeline_by_tp_grid_trains_the_serial_weights_and_momentum(
    mpi_run, tmp_path, serial_run
):
    """--grid pp=2,tp=2 on 4 ranks (2 micro-batches, 1f1b): stages of tensor-parallel layers;
    the checkpoint holds the serial weights and momentum."""
    out = str(tmp_path / "pp_tp")
    grid = ["--grid", "pp=2,tp=2", "--micro-batches", "2"]
    train_mpi(mpi_run, 4, *grid, "--batch-size", "64", "--epochs", "1", "--out", out)
    assert_serial_weights_and_momentum(out, serial_run)


@pytest.mark.timeout(200)
def test_the_one_weird_trick_layout_trains_the_serial_weights(mpi_run, tmp_path, serial_run):
    """--grid tp=2 --tp-layout one-weird-trick: convolutions on halves of each batch of 64."""
    out = str(tmp_path / "owt")
    grid = ["--grid", "tp=2", "--tp-layout", "one-weird-trick"]
    train_mpi(mpi_run, 2, *grid, "--batch-size", "64", "--epochs", "1", "--out", out)
    a, b = checkpoint(out), checkpoint(serial_run)
    for k in b.model_state:
        assert np.abs(a.model_state[k] - b.model_state[k]).max() <= 1e-10, k
    with open(os.path.join(out, "metrics.jsonl")) as f:
        (counted,) = [r for r in map(json.loads, f) if r["kind"] == "grid"]
    assert counted["plan"][0] == "batch" and counted["tp_bytes"] == counted["tp_predicted_bytes"]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("stage", ("2", "3"))
def test_zero_on_the_dp_axis_of_dp2_tp2_trains_the_serial_weights_and_momentum(
    mpi_run, tmp_path, serial_run, stage
):
    """``--grid dp=2,tp=2 --zero 2|3``: each tp rank's blocks and their momentum (and at stage
    3 the blocks' weights) sharded over its dp group; the checkpoint equals one process with
    twice the batch."""
    out = str(tmp_path / "zero")
    flags = ["--grid", "dp=2,tp=2", "--zero", stage, "--batch-size", "32", "--epochs", "1"]
    train_mpi(mpi_run, 4, *flags, "--out", out)
    assert_serial_weights_and_momentum(out, serial_run)


@pytest.mark.parametrize("grid", ["tp=2", "spatial=2"])
def test_a_grid_run_resumed_without_batch_size_keeps_its_samples_per_step(
    mpi_run, tmp_path, grid, capsys
):
    """The batch of a grid run is its replica's (dp=1 here): resumed on its grid, in one
    process, or as --dist sync on 2 ranks, a step still takes 8 samples; without its grid
    under mpiexec it is refused, naming the grid, never turned into data parallelism."""
    first = str(tmp_path / "first")
    options = ["--test-subset", "64", "--batch-size", "8", "--epochs", "1", "--out", first]
    train_mpi(mpi_run, 2, "--grid", grid, *options)
    resume = os.path.join(first, "checkpoint.npz")
    capsys.readouterr()
    assert main(["report", first]) == 0  # the layout by name, its bytes, no empty columns
    printed = capsys.readouterr().out
    assert printed.startswith(f"grid {grid}  (") and "staleness" not in printed, printed
    assert ("tp MiB sent per rank in epoch 1" in printed) == (grid == "tp=2"), printed
    if grid == "spatial=2":  # halos, gather and window gradients as step_bytes counts them
        line = next(x for x in printed.splitlines() if "spatial MiB sent by all ranks" in x)
        measured, predicted = line.rsplit(": ", 1)[1].split("/")
        assert measured == predicted and float(measured) > 0, line

    def samples_per_step(run_dir):
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        return config["batch_size"] * config["world_size"]

    again = str(tmp_path / "again")
    out = train_mpi(mpi_run, 2, "--grid", grid, "--resume", resume, "--epochs", "2", "--out", again)
    assert samples_per_step(again) == 8 and "samples per step" not in out.output, out.output
    alone = str(tmp_path / "alone")
    assert main(["train", "--resume", resume, "--epochs", "2", "--out", alone]) == 0
    assert samples_per_step(alone) == 8
    refused = mpi_run(2, "-m", "minidl", "train", "--resume", resume, "--epochs", "2", timeout=60)
    assert refused.returncode == 1 and f"add --grid {grid} to continue it" in refused.output
    replicas = str(tmp_path / "replicas")
    out = train_mpi(
        mpi_run, 2, "--dist", "sync", "--resume", resume, "--epochs", "2", "--out", replicas
    )
    assert samples_per_step(replicas) == 8, out.output
    assert f"(the checkpoint's run: --grid {grid})" in out.output, out.output
    assert "--batch-size 4 per process (the checkpoint's run: 8)" in out.output, out.output
