"""The course examples run as a student runs them, and teach what they claim.

Each example is started as a script (a fresh interpreter, as on the command
line) for one epoch on the real Fashion-MNIST; its printed test accuracy must
be one that only a learning model reaches (chance is 10%).
"""
import os
import re
import subprocess
import sys

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")


def run_example(name, *args):
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_mlp_example_learns_in_one_epoch():
    out = run_example("01_mlp_fashion_mnist.py", "--epochs", "1")
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out).group(1))
    assert accuracy >= 80.0, out


def test_lenet_example_learns_in_one_epoch():
    out = run_example("02_lenet5_fashion_mnist.py", "--epochs", "1", "--conv-algo", "im2col")
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out).group(1))
    assert accuracy >= 80.0, out
    assert "61,706 parameters" in out
