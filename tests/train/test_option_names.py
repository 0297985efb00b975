"""A message names an option where it is shown: the field from Python, the flag on the
command line; running the command line in-process leaves no naming behind."""

import pytest

from minidl.dist.config import DistConfig
from minidl.train import ConfigError, TrainConfig
from minidl_app.cli import error_text, flag, main
from minidl_app.rundir import run_status

PIPELINE = "micro_batches, schedule and chunks set up a pipeline: add pp=P to grid (e.g. grid pp=2)"
FLAGGED = (
    "--micro-batches, --schedule and --chunks set up a pipeline: add pp=P to --grid "
    "(e.g. --grid pp=2)"
)


def test_one_error_names_fields_in_python_and_flags_on_the_command_line(capsys):
    with pytest.raises(ConfigError) as caught:
        DistConfig(micro_batches=4).check(TrainConfig())
    assert str(caught.value) == PIPELINE
    assert error_text(caught.value) == FLAGGED
    assert main(["train", "--micro-batches", "4"]) == 1
    assert f"minidl train: error: {FLAGGED} (--verbose shows where)" in capsys.readouterr().err
    with pytest.raises(ConfigError) as later:
        DistConfig(micro_batches=4).check(TrainConfig())
    assert str(later.value) == PIPELINE


def test_a_returned_line_names_the_options_its_caller_asks_for(tmp_path):
    (tmp_path / "config.json").write_text('{"epochs": 2}')
    (tmp_path / "metrics.jsonl").write_text('{"kind": "epoch", "epoch": 1}\n')
    (tmp_path / "checkpoint.npz").write_bytes(b"")
    checkpoint = tmp_path / "checkpoint.npz"
    assert run_status(tmp_path)[1].endswith(f"continue with resume {checkpoint}")
    assert run_status(tmp_path, flag)[1].endswith(f"--resume {checkpoint}")
