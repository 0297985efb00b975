"""ResNet-20's residual blocks under the layouts that keep them whole (data parallelism,
ZeRO, recomputation, a pipeline of whole blocks), and the refusal of those that would split
them (tensor and spatial parallelism)."""

import os

import numpy as np
import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.dist.config import DistConfig
from minidl.dist.grid import GridShape
from minidl.train import TrainConfig
from minidl.train.checkpoint import load_checkpoint
from minidl.train.config import ConfigError
from minidl_app.cli import main
from tests.pipeline.test_pipeline_cli import minidl_train_mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

# 2 steps of 16 images, in float64 so that the layouts agree to ~1e-12
COMMON = ["--model", "resnet20", "--subset", "32", "--test-subset", "16", "--epochs", "1"]
COMMON += ["--batch-size", "16", "--dtype", "float64", "--no-progress"]


def weights(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz")).model_state


def assert_same(state, expected):
    assert list(state) == list(expected)
    for name, value in expected.items():
        error = np.linalg.norm(state[name] - value) / max(np.linalg.norm(value), 1e-300)
        assert error < 1e-10, (name, error)


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("serial") / "run")
    assert main(["train", *COMMON, "--out", out]) == 0
    return weights(out)


def test_recomputed_segments_of_whole_blocks_train_as_the_serial_run(serial_run, tmp_path):
    out = str(tmp_path / "run")
    assert main(["train", *COMMON, "--recompute", "4", "--out", out]) == 0
    assert_same(weights(out), serial_run)


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_a_pipeline_of_whole_blocks_trains_as_the_serial_run(serial_run, tmp_path):
    out = str(tmp_path / "run")
    output = minidl_train_mpi(2, *COMMON, "--grid", "pp=2", "--out", out)
    assert "stages (layers) 0-" in output
    assert_same(weights(out), serial_run)  # one micro-batch: the same batch statistics


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_zero_on_nested_blocks_trains_as_plain_data_parallelism(tmp_path):
    """Each replica normalises its own half-batch (no serial oracle), so ZeRO stage 3 (which
    wraps each leaf layer's forward, here inside the blocks) is checked against plain
    synchronous data parallelism on the same two ranks."""
    runs = {}
    for name, flags in {"sync": [], "zero": ["--zero", "3"]}.items():
        runs[name] = str(tmp_path / name)
        minidl_train_mpi(2, *COMMON, "--dist", "sync", *flags, "--out", runs[name])
    assert_same(weights(runs["zero"]), weights(runs["sync"]))


@pytest.mark.parametrize(
    "grid, refusal",
    [
        (GridShape(dp=2, tp=2), "grid tp=2: resnet20's residual blocks cannot be split by the "),
        (GridShape(spatial=2), "grid spatial=2: resnet20's residual blocks cannot be split into"),
    ],
)
def test_tensor_and_spatial_layouts_are_refused_in_one_line(grid, refusal):
    with pytest.raises(ConfigError) as error:
        DistConfig(grid=grid).check(TrainConfig(model="resnet20"))
    message = str(error.value).replace("--", "")  # the Python API names options bare
    assert message.startswith(refusal) and "\n" not in message
    assert "use dist sync, zero, recompute or a pipeline (pp) of whole blocks" in message
