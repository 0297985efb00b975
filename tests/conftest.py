"""Shared test helpers: seeded data, devices, a one-line comparison with PyTorch, and no
shared memory left behind by the MPI jobs the tests kill."""

import contextlib
import os

import numpy as np
import pytest

import minidl as md
from minidl import backend

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
SHARED_MEMORY = "/dev/shm"
MPICH_SEGMENT = "mpich_shm_"  # MPICH's segment of a node's ranks, unlinked when they end well


def mpich_segments():
    """The names of MPICH's shared-memory segments in ``SHARED_MEMORY`` now."""
    try:
        return {n for n in os.listdir(SHARED_MEMORY) if n.startswith(MPICH_SEGMENT)}
    except OSError:
        return set()


def mapped_segments():
    """The segments some live process has mapped (another job still running)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    if MPICH_SEGMENT in line:
                        found.add(line.split(f"{SHARED_MEMORY}/", 1)[-1].split()[0])
        except OSError:
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left():
    """Remove the segments of the ranks the session's tests killed (MPICH leaves them, some
    megabytes each, until the machine restarts); those of running jobs stay."""
    before = mpich_segments()
    yield
    for name in mpich_segments() - before - mapped_segments():
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHARED_MEMORY, name))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param == "cuda" and not backend.cuda_available():
        pytest.skip("needs CuPy and an NVIDIA GPU")
    return request.param


def relative_error(a, b):
    """||a - b|| / max(||b||, tiny): one number for "how far apart" two arrays are."""
    a = np.asarray(backend.to_numpy(a), dtype=np.float64)
    b = np.asarray(backend.to_numpy(b), dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def compare_with_torch(md_fn, torch_fn, arrays, atol=1e-5, rtol=1e-4, grad=True, device="cpu"):
    """Run ``md_fn`` and ``torch_fn`` on the same float inputs; assert equal outputs and gradients.

    ``arrays`` are NumPy arrays; each becomes a minidl tensor and a torch
    tensor that require grad. The backward pass uses the same random output
    gradient on both sides.
    """
    torch = pytest.importorskip("torch")
    dtype = arrays[0].dtype.name
    mine = [md.tensor(a, requires_grad=grad, dtype=dtype, device=device) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=grad) for a in arrays]
    out, ref = md_fn(*mine), torch_fn(*theirs)
    np.testing.assert_allclose(
        out.numpy(),
        ref.detach().numpy(),
        atol=atol,
        rtol=rtol,
        err_msg="forward differs from PyTorch",
    )
    if grad:
        g = np.random.default_rng(7).standard_normal(ref.shape).astype(dtype)
        out.backward(md.tensor(g, dtype=dtype, device=device))
        ref.backward(torch.tensor(g))
        for i, (m, t) in enumerate(zip(mine, theirs)):
            np.testing.assert_allclose(
                m.grad if device == "cpu" else backend.to_numpy(m.grad),
                t.grad.numpy(),
                atol=atol,
                rtol=rtol,
                err_msg=f"gradient of input {i} differs from PyTorch",
            )
    return out
