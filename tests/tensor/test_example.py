"""examples/13_model_parallel_layouts.py under mpiexec: every layout gives one process's weights
and sends the bytes its formula predicts."""

import os
import re

import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST

pytestmark = pytest.mark.mpi

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")


@pytest.mark.timeout(200)
def test_every_layout_trains_one_process_weights_with_the_predicted_bytes(mpi_run):
    try:
        FashionMNIST(train=True)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST not found (make data)")
    script = os.path.join(EXAMPLE, "13_model_parallel_layouts.py")
    result = mpi_run(2, script, "--steps", "3", timeout=150)
    assert not result.timed_out and result.returncode == 0, result.output
    rows = re.findall(r"^(.+\(.+\))\s+[\d.]+\s+([\d,]+)\s+([\d,]+)\s+(\S+)$", result.output, re.M)
    assert [r[0].split(" (")[0] for r in rows] == [
        "data", "tensor", "spatial", "one weird trick",
    ], result.output  # fmt: skip
    for name, sent, formula, gap in rows:
        assert sent == formula, name
        assert float(gap) <= 1e-10, name
