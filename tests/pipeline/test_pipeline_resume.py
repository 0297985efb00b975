"""A pipeline's checkpoint is the whole run: it resumes on another layout exactly.

Oracle: one process trains 2 epochs straight (Adam, float64). Epoch 1 on one layout,
its checkpoint, epoch 2 resumed on another must end where the oracle ends, weights
and optimizer state (1e-10). The resumed runs take the checkpoint's options; the
batch size is each layout's share of the checkpoint's samples per step.
"""

import os

import numpy as np
import pytest
from test_pipeline_cli import minidl_train_mpi

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.checkpoint import load_checkpoint
from minidl_app.cli import main

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

# 96 = 3 steps of 32; Adam keeps arrays and a step count per parameter
RUN = ["--model", "lenet5", "--subset", "96", "--no-progress", "--dtype", "float64"]
RUN += ["--optimizer", "adam", "--lr", "0.002", "--test-batch-size", "1000"]
PIPEDREAM = ["--grid", "pp=2", "--micro-batches", "4", "--schedule", "pipedream"]


def checkpoint(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz"))


def assert_same_run(got, expected):
    """Weights and per-parameter optimizer state agree to 1e-10 (relative), under one
    process's names and parameter order."""
    assert list(got.model_state) == list(expected.model_state)
    for name, value in expected.model_state.items():
        error = np.linalg.norm(got.model_state[name] - value) / np.linalg.norm(value)
        assert error < 1e-10, (name, error)
    assert got.optimizer_state["hyper"]["lr"] == expected.optimizer_state["hyper"]["lr"]
    pairs = zip(got.optimizer_state["state"], expected.optimizer_state["state"], strict=True)
    for index, (state, oracle) in enumerate(pairs):
        assert state.keys() == oracle.keys(), index
        for key, value in oracle.items():
            error = np.linalg.norm(np.asarray(state[key] - value)) / np.linalg.norm(value)
            assert error < 1e-10, (index, key, error)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The oracle (one process, 2 epochs) and the epoch-1 checkpoints resumed below."""
    root = tmp_path_factory.mktemp("resume")
    assert (
        main(["train", *RUN, "--epochs", "2", "--batch-size", "32", "--out", str(root / "2")]) == 0
    )
    assert (
        main(["train", *RUN, "--epochs", "1", "--batch-size", "32", "--out", str(root / "1")]) == 0
    )
    return root


@pytest.fixture(scope="module")
def pp4(runs):
    """Epoch 1 on pp=4 (1F1B, 4 micro-batches): the checkpoint resumed elsewhere."""
    out = runs / "pp4"
    flags = ["--grid", "pp=4", "--micro-batches", "4", "--batch-size", "32"]
    minidl_train_mpi(4, *RUN, *flags, "--epochs", "1", "--out", str(out))
    return out


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_a_pipeline_checkpoint_holds_the_one_process_run(runs, pp4):
    saved = checkpoint(pp4)
    assert saved.meta["config"]["world_size"] == 1  # one replica shares each step's samples
    assert_same_run(saved, checkpoint(runs / "1"))


def resume_mpi(nprocs, ckpt, out, *flags):
    """Epoch 2 of the run of ``ckpt`` on ``nprocs`` ranks; asserts only epoch 2 ran."""
    args = [*RUN, "--epochs", "2", "--resume", str(ckpt), *flags, "--out", str(out)]
    output = minidl_train_mpi(nprocs, *args)
    assert "epoch 2/2" in output and "epoch 1/2" not in output, output


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_a_pipeline_checkpoint_resumes_in_one_process(runs, pp4, tmp_path):
    """--micro-batches is not restored without a pipeline, nor refused."""
    out = tmp_path / "run"
    ckpt = pp4 / "checkpoint.npz"
    assert main(["train", *RUN, "--epochs", "2", "--resume", str(ckpt), "--out", str(out)]) == 0
    assert_same_run(checkpoint(out), checkpoint(runs / "2"))


LAYOUTS = {  # name: (ranks, flags, start) with start the epoch-1 run resumed
    "pp4-to-sync2": (2, ["--dist", "sync"], "pp4"),
    "pp4-to-pp2-gpipe": (
        2,
        ["--grid", "pp=2", "--micro-batches", "3", "--schedule", "gpipe"],
        "pp4",
    ),
    "one-to-dp2-pp2": (4, ["--grid", "dp=2,pp=2", "--micro-batches", "2"], "1"),
}


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_checkpoint_resumes_on_another_layout(layout, runs, pp4, tmp_path):
    ranks, flags, start = LAYOUTS[layout]
    ckpt = (pp4 if start == "pp4" else runs / start) / "checkpoint.npz"
    resume_mpi(ranks, ckpt, tmp_path / "run", *flags)
    assert_same_run(checkpoint(tmp_path / "run"), checkpoint(runs / "2"))


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_pipedream_resumes_exactly(tmp_path):
    """PipeDream drains its window at each batch's end (every stashed version is
    used and dropped by its backward), so a checkpoint holds no version in flight:
    epoch 1, resume, epoch 2 equals 2 epochs straight."""
    straight, first, resumed = tmp_path / "straight", tmp_path / "first", tmp_path / "resumed"
    minidl_train_mpi(
        2, *RUN, *PIPEDREAM, "--batch-size", "32", "--epochs", "2", "--out", str(straight)
    )
    minidl_train_mpi(
        2, *RUN, *PIPEDREAM, "--batch-size", "32", "--epochs", "1", "--out", str(first)
    )
    resume_mpi(2, first / "checkpoint.npz", resumed, "--grid", "pp=2")
    assert_same_run(checkpoint(resumed), checkpoint(straight))
