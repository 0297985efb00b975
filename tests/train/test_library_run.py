"""The library's ``TrainingRun`` trains and keeps nothing on disk; the application's
``FolderRun`` (what ``minidl.train.fit`` runs) is the same run plus its folder."""

import os

import numpy as np
import pytest

import minidl as md
from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train import TrainConfig, TrainingRun, train_epochs
from minidl_app.run import FolderRun, fit

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)


def config(out):
    return TrainConfig(
        model="mlp", subset=128, test_subset=128, batch_size=32, epochs=2, threads=1, out=out
    )


def test_a_library_run_writes_nothing_and_a_folder_run_the_same_epochs_with_its_files(
    tmp_path, capsys
):
    alone, folder = tmp_path / "alone", tmp_path / "folder"
    with TrainingRun(config(str(alone))) as run:
        result = train_epochs(run, run.local_training())
    printed = capsys.readouterr().out
    assert not alone.exists()
    assert "test accuracy" in printed and "run directory" not in printed

    result_in_folder = md.train.fit(config(str(folder)))
    assert md.train.fit is fit
    files = set(os.listdir(folder))
    assert {"config.json", "checkpoint.npz", "metrics.jsonl"} <= files
    assert f"run directory: {folder}" in capsys.readouterr().out
    assert result["loss"] == result_in_folder["loss"]  # same seed, same steps, same numbers
    np.testing.assert_array_equal(result["confusion"], result_in_folder["confusion"])
    assert issubclass(FolderRun, TrainingRun)
