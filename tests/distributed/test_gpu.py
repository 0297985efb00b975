"""The allreduce algorithms, bcast and point-to-point calls on CuPy arrays (2 ranks)."""

import pytest

from minidl import backend

pytestmark = [pytest.mark.mpi, pytest.mark.gpu]


def test_cupy_arrays_through_every_algorithm(run_checks):
    pytest.importorskip("cupy")
    if not backend.cuda_available():
        pytest.skip("no NVIDIA GPU visible to CuPy")
    run_checks(2, "gpu")
