"""Backend switch and the malloc tuning that keeps step temporaries in the process."""

import subprocess
import sys

import numpy as np
import pytest

from minidl import backend

CHURN = """
import resource, sys, numpy as np
import minidl
if sys.argv[1] == "tune":
    minidl.backend.tune_malloc()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):  # a step's temporaries: 1-3.6 MB, freed together
    a = np.ones(250_000, dtype=np.float32)
    b = np.ones(700_000, dtype=np.float32)
    c = np.ones(900_000, dtype=np.float32)
    del c, b, a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(env_extra, tune=True):
    import os

    env = dict(os.environ, **env_extra)
    out = subprocess.run(
        [sys.executable, "-c", CHURN, "tune" if tune else "import-only"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_malloc_tuning_stops_page_faulting_freed_temporaries():
    tuned = page_faults({})
    untuned = page_faults({"MINIDL_NO_MALLOC_TUNING": "1"})
    imported = page_faults({}, tune=False)
    pages_per_step = 7_400_000 // 4096
    assert untuned > 25 * pages_per_step  # the freed heap top is trimmed and faulted in again
    assert imported > 25 * pages_per_step  # importing minidl leaves the process's malloc alone
    assert tuned < 5 * pages_per_step  # the memory stays in the process and is reused


def test_the_command_line_tunes_malloc(monkeypatch):
    from minidl import cli

    calls = []
    monkeypatch.setattr(backend, "tune_malloc", lambda: calls.append(1))
    cli.main(["summary", "--model", "lenet5"])
    assert calls == [1]


def test_get_array_module_and_devices():
    assert backend.get_array_module(np.ones(2)) is np
    assert backend.device_of(np.ones(2)) == "cpu"
    assert backend.normalize_device("cuda:1") == "cuda"
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        backend.normalize_device("tpu")


def test_cuda_request_without_gpu_explains_the_fix():
    if backend.cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CuPy and an NVIDIA GPU.*device='cpu'"):
        backend.xp_for("cuda")
