"""The buffer MPI reads or writes for a NumPy or CuPy array.

A NumPy array goes as it is; a CuPy array directly only to a CUDA-aware library
(``cuda_aware_mpi``), else as a host copy whose result ``copy_back`` returns to the GPU.
The current stream is synchronised first either way: mpi4py cannot see GPU streams.
"""

import ctypes
import ctypes.util
import os
import re

import numpy as np

from minidl import backend
from minidl.dist.collectives import Scratch


def _loaded_libmpi():
    """The MPI shared library mpi4py loaded (ctypes handle), or None."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            paths = re.findall(r"(/\S*/libmpi(?:_abi)?\.so[.\d]*)$", maps.read(), re.MULTILINE)
    except OSError:
        pass
    for path in paths + [ctypes.util.find_library("mpi")]:
        if path:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def cuda_aware_mpi(mpi_comm):
    """True when the MPI library accepts CUDA device buffers: the ``MINIDL_CUDA_AWARE_MPI=0|1``
    override, else ``cuda`` in the MPI-4.1 info key ``mpi_memory_alloc_kinds``, else
    ``MPIX_Query_cuda_support()`` (Open MPI, MPICH >= 4); anything else is not aware."""
    override = os.environ.get("MINIDL_CUDA_AWARE_MPI")
    if override in ("0", "1"):
        return override == "1"
    try:
        info = mpi_comm.Get_info()
        kinds = info.Get("mpi_memory_alloc_kinds") or ""
        info.Free()
        if "cuda" in kinds:
            return True
    except Exception:  # pre-MPI-4 libraries
        pass
    lib = _loaded_libmpi()
    query = getattr(lib, "MPIX_Query_cuda_support", None) if lib is not None else None
    return bool(query is not None and query())


class Staging:
    """The buffers MPI reads (``outgoing``) and writes (``incoming``) for one communicator.
    A call that returns before MPI is done with the buffer (``isend``, ``irecv``,
    ``iallreduce``) passes ``pending=True`` for a host buffer of its own; otherwise one
    host buffer per direction is reused."""

    def __init__(self, cuda_aware):
        self.cuda_aware = cuda_aware
        self._outgoing, self._incoming = Scratch(), Scratch()

    def outgoing(self, array, pending=False):
        """What MPI reads for ``array``: itself, or a host copy of its values."""
        if self._on_host(array) or self.cuda_aware:
            return array
        if pending:
            return array.get()
        host = self._host(self._outgoing, array)
        array.get(out=host)
        return host

    def incoming(self, array, pending=False):
        """What MPI writes for ``array``: itself, or a host buffer to ``copy_back`` from."""
        if self._on_host(array) or self.cuda_aware:
            return array
        if pending:
            return np.empty(array.shape, array.dtype)
        return self._host(self._incoming, array)

    def host_copy(self, array):
        """``outgoing(array, pending=True)``, staged even when MPI is CUDA-aware: on device
        buffers ``MPI_Iallreduce`` crashes some CUDA-aware Open MPI versions (mpi4py issue 164)."""
        return array if self._on_host(array) else array.get()

    @staticmethod
    def copy_back(array, buffer):
        """Copy a staged result back into the GPU array (nothing when MPI wrote ``array``)."""
        if buffer is not array:
            array.set(buffer)

    @staticmethod
    def _on_host(array):
        """True for a NumPy array; False for a CuPy array, once its stream is synchronised."""
        if not array.flags.c_contiguous:
            raise ValueError(
                f"MPI sends and receives C-contiguous arrays, got a strided {array.dtype} array "
                f"of shape {array.shape}; pass a contiguous copy (np.ascontiguousarray(x), or "
                "cupy's) and copy a received result back into the view"
            )
        if isinstance(array, np.ndarray):
            return True
        backend.synchronize(array)
        return False

    @staticmethod
    def _host(scratch, array):
        return scratch.get(np.empty(0, array.dtype), array.size).reshape(array.shape)
