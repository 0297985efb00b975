"""``minidl train --recompute [N]``: the weights of the plain run (float64, 20 steps), in one
process and on MPI layouts; checkpoint files that load both ways; bad values refused in one
line."""

import os

import numpy as np
import pytest

import minidl as md
from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.dist.config import DistConfig
from minidl.dist.grid import GridShape
from minidl.train import ConfigError, TrainConfig
from minidl.train.checkpoint import load_checkpoint
from minidl_app.cli import main
from tests.distributed.conftest import mpi_run

__all__ = ["mpi_run"]

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

# 20 steps of 32 images, float64: the runs compare to 1e-10
STEPS = ["--subset", "640", "--test-subset", "200", "--batch-size", "32", "--epochs", "1"]
COMMON = [*STEPS, "--dtype", "float64", "--conv-algo", "im2col", "--no-progress"]


def weights(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz")).model_state


def assert_same_weights(a, b, tol=1e-10):
    assert list(a) == list(b)
    for key in a:
        assert np.abs(a[key] - b[key]).max() <= tol, key


def train(tmp_path, name, *flags):
    out = str(tmp_path / name)
    assert main(["train", *COMMON, *flags, "--out", out]) == 0
    return out


@pytest.mark.parametrize(
    "model, recompute", [("lenet5", ["--recompute"]), ("alexnet-small", ["--recompute", "2"])]
)
def test_a_recomputed_run_trains_the_plain_runs_weights(tmp_path, model, recompute):
    """LeNet-5 with round(sqrt(12)) = 3 segments; AlexNet-small (dropout) with 2."""
    plain = train(tmp_path, "plain", "--model", model)
    recomputed = train(tmp_path, "recomputed", "--model", model, *recompute)
    assert_same_weights(weights(recomputed), weights(plain))


def test_checkpoints_load_both_ways_and_a_resume_may_change_the_segments(tmp_path, capsys):
    """A recomputed run's file loads into a plain model; resuming it without recomputation,
    or a plain run's with it, continues as the plain run does, unannounced (a launch choice)."""
    plain = train(tmp_path, "plain", "--model", "lenet5", "--epochs", "2")
    recomputed = train(tmp_path, "recomputed", "--model", "lenet5", "--recompute", "4")
    md.models.lenet5().to("float64").load_state_dict(weights(recomputed))
    first = train(tmp_path, "first", "--model", "lenet5")
    capsys.readouterr()
    for run_dir, flags in ((recomputed, ["--recompute", "0"]), (first, ["--recompute", "2"])):
        resume = ["--resume", os.path.join(run_dir, "checkpoint.npz"), "--epochs", "2"]
        assert main(["train", "--no-progress", *resume, *flags]) == 0
        assert "--recompute" not in capsys.readouterr().out  # not announced
        assert_same_weights(weights(run_dir), weights(plain))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--recompute", "13"], "--recompute 13: the model has 12 layers; choose 1 to 12"),
        (
            ["--grid", "spatial=2", "--recompute"],
            "--recompute with --grid spatial=2: the spatial model gathers",
        ),
        (
            ["--grid", "tp=2", "--tp-layout", "one-weird-trick", "--recompute", "2"],
            "--recompute with --tp-layout one-weird-trick: its first layers",
        ),
    ],
)
def test_what_cannot_be_recomputed_is_refused_in_one_line(tmp_path, capsys, flags, message):
    assert main(["train", *COMMON, "--out", str(tmp_path / "run"), *flags]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_a_flag_value_that_is_not_a_count_is_a_usage_error(capsys, value):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--recompute", value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert f"argument --recompute: {value!r} is not an integer >= 0" in err


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_the_configuration_refuses_what_is_not_a_segment_count(value):
    with pytest.raises(ConfigError, match=f"recompute {value!r}: must be an integer >= 0"):
        TrainConfig(recompute=value).check()


def test_a_layout_that_moves_data_between_layers_is_refused_only_with_recomputation():
    spatial = DistConfig(grid=GridShape.parse("spatial=2"))
    spatial.check(TrainConfig())
    with pytest.raises(ConfigError, match="spatial model gathers its image blocks"):
        spatial.check(TrainConfig(recompute=2))


@pytest.mark.mpi
@pytest.mark.parametrize(
    "layout",
    [["--dist", "sync"], ["--grid", "tp=2"], ["--grid", "pp=2", "--micro-batches", "2"]],
    ids=["sync", "tp", "pp"],
)
def test_two_ranks_recompute_the_plain_runs_weights(mpi_run, tmp_path, layout):
    """Data parallelism with its hooks, tensor parallelism's blocks recomputed with their
    collectives, and pipeline stages cutting the serial segments at their bounds."""
    runs = {}
    for name, recompute in (("plain", []), ("recomputed", ["--recompute", "3"])):
        out = str(tmp_path / name)
        args = ["-m", "minidl", "train", "--model", "lenet5", *COMMON, *layout, *recompute]
        result = mpi_run(2, *args, "--out", out, timeout=240)
        assert not result.timed_out and result.returncode == 0, result.output
        runs[name] = weights(out)
    assert_same_weights(runs["recomputed"], runs["plain"])
