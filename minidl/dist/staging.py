"""Moving NumPy and CuPy arrays to MPI: the buffer MPI reads or writes for an array.

MPI gets a NumPy array as it is. A CuPy array goes to MPI directly only when
the library is CUDA-aware (``cuda_aware_mpi``); otherwise MPI works on a
host copy ("staging"), and a received result is copied back to the GPU
with ``copy_back``. Either way the current stream is synchronised first:
mpi4py cannot see GPU streams.
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
    """True when the MPI library accepts CUDA device buffers.

    Checked in order: the ``MINIDL_CUDA_AWARE_MPI=0|1`` override; the MPI-4.1
    info key ``mpi_memory_alloc_kinds`` of the communicator (lists ``cuda``
    when supported); ``MPIX_Query_cuda_support()``, which Open MPI
    (``mpi-ext.h``) and MPICH >= 4 export. Anything else counts as not aware.
    """
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

    A reduction in place is outgoing, then copied back. A call that returns
    before MPI is done with the buffer (``isend``, ``irecv``, ``iallreduce``)
    passes ``pending=True`` and gets a host buffer of its own; otherwise one
    host buffer per direction is reused from call to call.
    """

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
        """``outgoing(array, pending=True)``, but staged even when MPI is CUDA-aware.

        For ``MPI_Iallreduce``: on device buffers it crashes some CUDA-aware
        Open MPI versions (mpi4py issue 164).
        """
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
