"""The NumPy/CuPy switch: every op is written once against ``xp``.

``get_array_module(x)`` returns ``numpy`` for host arrays and ``cupy`` for
device arrays, so ``xp = get_array_module(x); xp.exp(x)`` runs on either.
CuPy is imported lazily, the first time a ``"cuda"`` device is asked for or a
CuPy array is seen, so minidl works (and imports fast) where CuPy is absent.
"""

import ctypes
import os
import sys

import numpy as np

from .parallel import get_num_threads, set_num_threads  # noqa: F401  (md.backend's API)
from .pool import HOST_POOL, format_bytes

DEVICES = ("cpu", "cuda")

_cupy = None  # the cupy module once imported
_cupy_error = None  # why it could not be imported


def cupy_module():
    """Return the ``cupy`` module, or None when CuPy or a GPU is unavailable."""
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            _cupy = cupy
        except Exception as exc:  # ImportError, or CUDA present without a GPU
            _cupy_error = exc
    return _cupy


def cuda_available():
    """True when CuPy imports and sees at least one GPU."""
    return cupy_module() is not None


def get_array_module(x):
    """``numpy`` or ``cupy``, whichever owns ``x`` (a Tensor or an array)."""
    if isinstance(x, np.ndarray) or _cupy is None:
        return np
    if hasattr(x, "requires_grad"):  # a Tensor: look at its array
        x = x.data
    return _cupy.get_array_module(x)


def xp_for(device):
    """The array module of a device name (``"cpu"``, ``"cuda"`` or ``"cuda:N"``)."""
    if normalize_device(device) == "cpu":
        return np
    cp = cupy_module()
    if cp is None:
        raise RuntimeError(
            f"device {device!r} needs CuPy and an NVIDIA GPU ({_cupy_error}); "
            "install minidl[gpu] on a machine with a GPU, or use device='cpu'"
        )
    return cp


def normalize_device(device):
    """Map a device argument to ``"cpu"`` or ``"cuda"``; reject anything else."""
    if device is None:
        return "cpu"
    name = str(device).split(":")[0]
    if name not in DEVICES:
        raise ValueError(f"unknown device {device!r}: choose one of {DEVICES}")
    return name


def device_of(array):
    """``"cpu"`` for a NumPy array, ``"cuda"`` for a CuPy array."""
    return "cpu" if isinstance(array, np.ndarray) else "cuda"


def to_device(array, device):
    """Move an array to ``device``; returns the same object when already there."""
    device = normalize_device(device)
    if device_of(array) == device:
        return array
    if device == "cpu":
        return array.get()
    return xp_for("cuda").asarray(array)


def to_numpy(array):
    """A NumPy array of a host array (itself), a device array (a copy) or a number."""
    if isinstance(array, np.ndarray):
        return array
    return array.get() if hasattr(array, "get") else np.asarray(array)


def synchronize(array_or_device="cuda"):
    """Wait for queued GPU work (a no-op on the CPU); MPI must see finished buffers."""
    if _cupy is not None and (array_or_device == "cuda" or device_of(array_or_device) == "cuda"):
        _cupy.cuda.get_current_stream().synchronize()


def scatter_add(target, index, values):
    """``target[index] += values`` with repeated indices summed (``ufunc.at``)."""
    xp = get_array_module(target)
    if xp is np:
        np.add.at(target, index, values)
    else:
        import cupyx

        cupyx.scatter_add(target, index, values)
    return target


def empty(shape, dtype, xp=np, op="an array"):
    """An uninitialised array on xp's device, from minidl's buffer pool on the CPU
    (``minidl/pool.py``: a step's large temporaries reuse the last step's memory) and from
    CuPy's memory pool on a GPU. ``op`` names the caller in the error for an array larger
    than the memory."""
    if xp is np:
        return HOST_POOL.empty(shape, dtype, op)
    try:
        return xp.empty(shape, dtype=dtype)
    except xp.cuda.memory.OutOfMemoryError as exc:
        nbytes = np.dtype(dtype).itemsize * int(np.prod(shape))
        raise MemoryError(
            f"{op}: an array of shape {tuple(shape)} ({np.dtype(dtype)}) needs "
            f"{format_bytes(nbytes)}, more than the GPU has free; use a smaller batch"
        ) from exc


def empty_like(a, dtype=None, op="an array"):
    """``empty`` shaped like ``a`` and in its memory layout (an NHWC array seen as NCHW gives
    the same view): elementwise passes over matching strides run several times faster."""
    xp = get_array_module(a)
    order = sorted(range(a.ndim), key=lambda axis: -abs(a.strides[axis]))  # outermost first
    out = empty(tuple(a.shape[axis] for axis in order), dtype or a.dtype, xp, op)
    return out.transpose(tuple(order.index(axis) for axis in range(a.ndim)))


def zeros(shape, dtype, xp=np, op="an array"):
    """``empty`` filled with zeros."""
    out = empty(shape, dtype, xp, op)
    out[...] = 0
    return out


def empty_cache():
    """Release the memory that minidl keeps for reuse: the free blocks of its host buffer
    pool, and CuPy's cached device memory when CuPy is in use."""
    HOST_POOL.clear()
    if _cupy is not None:
        _cupy.get_default_memory_pool().free_all_blocks()
        _cupy.get_default_pinned_memory_pool().free_all_blocks()


def pool_stats():
    """The host buffer pool's counters: free and leased bytes, its limit, hits and misses."""
    return HOST_POOL.stats()


def limit_threads(n, blas=None):
    """Cap the BLAS and FFT thread pools at ``blas`` (None: ``n``) while the returned
    controller lives, and run minidl's own chunked ops on ``n`` threads (``set_num_threads``;
    None: no cap)."""
    if n is None:
        return None
    from threadpoolctl import threadpool_limits

    set_num_threads(n)

    return threadpool_limits(limits=n if blas is None else blas)


def tune_malloc():
    """Keep freed memory in the process instead of returning it to the OS after every step.

    glibc gives large blocks (> 128 KiB by default) back with munmap as soon
    as they are freed, so each training step page-faults its temporaries in
    again; measured here, that cost ~40% of a NumPy LeNet step, and half the
    time of a fresh 151 MB gradient (AlexNet's fc6). Serving every block from
    the heap (no mmap) and never trimming it keeps them: the process keeps its
    peak memory, the usual trade of a caching allocator. It changes the whole
    process, so importing minidl never does it: the ``minidl`` command and the
    benchmarks call it first thing, and a training script may too. minidl's
    own buffer pool (``empty``, ``minidl/pool.py``) now keeps the large arrays
    of a step without it: measured, the same CPU time per conv layer and per
    LeNet step with or without this setting (benchmarks/RESULTS.md). Set
    MINIDL_NO_MALLOC_TUNING=1 to leave malloc alone. Returns True when the
    settings were applied.
    """
    if os.environ.get("MINIDL_NO_MALLOC_TUNING") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (e.g. musl): nothing to tune
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    ok = libc.mallopt(m_mmap_max, 0)
    ok &= libc.mallopt(m_trim_threshold, 2**31 - 1)
    return bool(ok)
