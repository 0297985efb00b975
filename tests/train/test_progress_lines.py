"""Progress when stderr is not a terminal: a line every few seconds, never a redrawn bar."""

import io
import subprocess
import sys

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.progress import ProgressLines, progress


class Clock:
    """A clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step):
        self.now, self.step = -step, step

    def __call__(self):
        self.now += self.step
        return self.now


def test_a_line_every_interval_with_the_latest_numbers():
    out = io.StringIO()
    lines = ProgressLines(list(range(10)), "epoch 1", out, interval=10, clock=Clock(3))
    for item in lines:
        lines.set_postfix(loss=f"{item / 10:.4f}")
    # the clock reads 0 at the start, then 3, 6, ...: 12 - 0 >= 10 after the 4th item (3),
    # 24 - 12 after the 8th (7); each line shows the numbers set for the item just done
    assert out.getvalue() == (
        "epoch 1: 4/10 batches (40%), loss=0.3000\nepoch 1: 8/10 batches (80%), loss=0.7000\n"
    )


def test_a_stream_that_is_not_a_terminal_gets_lines_and_a_disabled_one_nothing():
    loader = [1, 2, 3]
    assert isinstance(progress(loader, "epoch 1", True, stream=io.StringIO()), ProgressLines)
    assert progress(loader, "epoch 1", False, stream=io.StringIO()) is loader


def test_training_into_a_log_file_writes_no_redraws(tmp_path):
    try:
        FashionMNIST(train=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST not found (make data)")
    command = [sys.executable, "-m", "minidl", "train", "--model", "mlp", "--subset", "640"]
    command += ["--epochs", "1", "--out", str(tmp_path / "run")]
    done = subprocess.run(command, capture_output=True, timeout=120)  # bytes: "\r" kept
    assert done.returncode == 0, done.stderr
    assert b"\r" not in done.stderr and b"%|" not in done.stderr, done.stderr[:300]
