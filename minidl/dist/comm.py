"""The MPI communicator of minidl: ``comm = md.dist.init()``.

A thin layer over ``mpi4py`` that speaks NumPy and CuPy arrays. Arrays go
through mpi4py's buffer calls (``Send``, ``Recv``, ``Allreduce``...), never
the pickle-based lower-case ones, which are ~10x slower on large arrays;
small Python objects may use ``bcast_object`` and ``allgather_object``.
mpi4py is imported on ``init()`` only, so ``import minidl`` works without
MPI. This module is minidl's one door to MPI: the rest of ``minidl.dist``
(data parallelism, the parameter server, model averaging) talks through a
``Communicator`` and its ``Request`` objects.

CuPy arrays: the current stream is synchronised before MPI touches a buffer
(mpi4py cannot see GPU streams). The GPU buffer goes to MPI directly only when
the library is CUDA-aware (``cuda_aware_mpi()``); otherwise it is staged
through host memory.

``init()`` also installs an exception hook: an uncaught exception on any rank
prints that rank's traceback once and calls ``MPI_Abort``, so no rank is left
waiting forever in a collective.
"""
import concurrent.futures
import ctypes
import ctypes.util
import os
import re
import sys
import threading
import time
import traceback

import numpy as np

from minidl import backend
from minidl.dist import collectives, costmodel

OPS = ("sum", "mean")
AUTO_MODES = ("rule", "model", "measure")

_world = None


def mpi_module():
    """``mpi4py.MPI`` (importing it initialises MPI), or a clear error when it is missing."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError("minidl.dist needs mpi4py and an MPI library: "
                          "pip install minidl[mpi]") from exc
    return MPI


def init(auto="rule"):
    """Initialise MPI once and return the world ``Communicator``.

    ``auto`` says how ``algorithm="auto"`` picks an allreduce algorithm:
    ``"rule"`` (the default: a fixed rule by message size,
    ``costmodel.choose_by_rule``, so that a seeded run gives the same bits
    every time), ``"measure"`` (time every algorithm once per message size,
    the library's own included) or ``"model"`` (the fitted alpha-beta-gamma
    cost model, which has no formula for the library's own algorithm and so
    never picks it). The algorithms add in different orders, so the two
    timing-based modes may round differently from run to run.
    """
    global _world
    if _world is None:
        MPI = mpi_module()
        install_abort_hooks(MPI.COMM_WORLD)
        _world = Communicator(MPI.COMM_WORLD, auto=auto)
    else:
        _world.auto = _check_auto(auto)
    return _world


def install_abort_hooks(mpi_comm):
    """Make an uncaught exception (main thread or other threads) abort every rank.

    Without this, the failing rank exits while the others block forever in
    their next collective. The traceback is printed once, by the failing rank.
    """
    header = f"minidl.dist: uncaught exception on rank {mpi_comm.Get_rank()} " \
             f"of {mpi_comm.Get_size()}, aborting all ranks\n"

    def abort(exc_type, exc, tb):
        sys.stderr.write(header + "".join(traceback.format_exception(exc_type, exc, tb)))
        abort_job(mpi_comm, 1)

    sys.excepthook = abort
    threading.excepthook = lambda hook: abort(hook.exc_type, hook.exc_value, hook.exc_traceback)


OUTPUT_GRACE_S = 0.5


def abort_job(mpi_comm, code):
    """End every rank of ``mpi_comm``'s job with exit status ``code`` (``MPI_Abort``).

    mpiexec forwards each rank's output asynchronously and discards what it
    has not forwarded when the job is torn down; a rank that printed why it
    aborts therefore flushes and gives it ``OUTPUT_GRACE_S`` first (under load
    the message was seen to vanish without this pause). Never returns: an
    ``MPI_Abort`` may return before the job is torn down (MPICH), and the
    rank must not go on as if nothing happened.
    """
    sys.stderr.flush()
    sys.stdout.flush()
    time.sleep(OUTPUT_GRACE_S)
    try:
        mpi_comm.Abort(code)
    finally:
        os._exit(code or 1)


def world():
    """The world ``Communicator`` if ``init()`` ran in this process, else None."""
    return _world


def _loaded_libmpi():
    """The MPI shared library mpi4py loaded (ctypes handle), or None."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            paths = re.findall(r"(/\S*/libmpi(?:_abi)?\.so[.\d]*)$", maps.read(), re.M)
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


def _check_auto(auto):
    if auto not in AUTO_MODES:
        raise ValueError(f"auto={auto!r}: choose one of {', '.join(AUTO_MODES)}")
    return auto


def _check_reduction(array, op):
    """True for a mean; rejects what cannot be reduced in place."""
    if op not in OPS:
        raise ValueError(f"allreduce: unknown op {op!r}; choose one of {', '.join(OPS)}")
    if not (array.flags.c_contiguous and array.dtype.kind in "fiuc"):
        raise ValueError(
            f"allreduce works in place on C-contiguous numeric arrays, got dtype {array.dtype}"
            f" (contiguous={array.flags.c_contiguous}); reduce y = np.ascontiguousarray(x) and"
            " copy it back")
    if op == "mean" and array.dtype.kind not in "fc":
        raise ValueError(f"allreduce(op='mean') needs a float array, got {array.dtype}; "
                         "use op='sum' and divide, or cast to a float dtype")
    return op == "mean"


def _on_device_of(array, function, *args):
    """Run ``function(*args)`` with ``array``'s GPU current (a new thread starts on GPU 0)."""
    if isinstance(array, np.ndarray):
        return function(*args)
    with array.device:
        return function(*args)


class Request:
    """A pending operation: ``wait()`` finishes it and returns its array, ``test()`` polls.

    ``finish`` (copy a staged result back to the GPU, divide a mean) runs
    once, in the thread that calls ``wait``/``test``. ``handle`` is the
    mpi4py request behind an MPI operation (None for an operation that runs
    on the background thread or finished at once), which lets
    ``Communicator.wait_any`` wait for several in one ``MPI_Waitany``.
    """

    def __init__(self, result, wait=None, test=None, finish=None, handle=None):
        self._result = result
        self._wait = wait
        self._test = test
        self._finish = finish
        self._handle = handle
        self._done = wait is None
        self.started = time.perf_counter()
        self.finished = self.started if self._done else None  # when the data was reduced

    @classmethod
    def of_mpi(cls, result, handle, finish=None):
        """The ``Request`` of an mpi4py request ``handle`` whose data lands in ``result``."""
        return cls(result, handle.Wait, handle.Test, finish, handle)

    def mark_finished(self):
        """Record when the operation itself ended (a background thread calls this)."""
        if self.finished is None:
            self.finished = time.perf_counter()

    def _complete(self):
        self._wait()  # returns at once when finished; re-raises a background failure
        self.mark_finished()
        if self._finish is not None:
            self._finish()
        self._done = True

    def test(self):
        """True (and the result is in place) once the operation finished."""
        if not self._done and self._test():
            self._complete()
        return self._done

    def wait(self):
        """Block until the operation finished; return its array."""
        if not self._done:
            self._complete()
        return self._result

    def cancel(self):
        """Withdraw a pending receive that no message will match (then it counts as complete).

        What its array holds afterwards is undefined. Only MPI operations can
        be withdrawn; a finished request is left as it is.
        """
        if self._done:
            return
        if self._handle is None:
            raise ValueError("Request.cancel: this request runs on minidl's background thread "
                             "(a hand-written iallreduce) and cannot be withdrawn; wait() for it")
        self._handle.Cancel()
        self._complete()


def _requests(what, requests):
    """``requests`` as a list, or an error naming what to pass instead."""
    requests = list(requests)
    for request in requests:
        if not isinstance(request, Request):
            raise TypeError(f"Communicator.{what}: expected minidl Requests (what isend, irecv, "
                            f"ibarrier and iallreduce return), got {type(request).__name__}; "
                            "start the operation through the Communicator")
    return requests


class Communicator:
    """A group of MPI ranks exchanging NumPy/CuPy arrays.

    Collectives run on a duplicate of the MPI communicator, so their messages
    can never match a user's ``send``/``recv``; a protocol of point-to-point
    messages gets a communicator of its own from ``dup()``. ``.mpi`` is the
    wrapped mpi4py communicator, for experiments with what is not offered here.
    """

    def __init__(self, mpi_comm, auto="rule"):
        MPI = mpi_module()
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()
        self.auto = _check_auto(auto)
        self.cuda_aware = cuda_aware_mpi(mpi_comm)
        self.threaded = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self._collective = mpi_comm.Dup()
        self._scratch = collectives.Scratch()
        self._staging = collectives.Scratch()
        self._background = None
        self._cost_params = None
        self._measured = {}

    # ---- buffers -----------------------------------------------------------------------
    def _mpi_buffer(self, array, copy_in=True, reuse=True, device_ok=True):
        """What MPI reads or writes for ``array``: itself, or a host copy of a GPU array.

        ``reuse=False`` gives a fresh host copy (for requests still pending
        when the next call comes); ``device_ok=False`` stages even with a
        CUDA-aware library.
        """
        if not array.flags.c_contiguous:
            raise ValueError(
                f"MPI sends and receives C-contiguous arrays, got a strided {array.dtype} array "
                f"of shape {array.shape}; pass a contiguous copy (np.ascontiguousarray(x), or "
                "cupy's) and copy a received result back into the view")
        if isinstance(array, np.ndarray):
            return array
        backend.synchronize(array)
        if self.cuda_aware and device_ok:
            return array
        if not reuse:
            return array.get() if copy_in else np.empty(array.shape, array.dtype)
        host = self._staging.get(np.empty(0, array.dtype), array.size).reshape(array.shape)
        if copy_in:
            array.get(out=host)
        return host

    @staticmethod
    def _copy_back(array, buffer):
        """Copy a staged result back into the GPU array."""
        if buffer is not array:
            array.set(buffer)

    # ---- collectives -------------------------------------------------------------------
    def abort(self, code=1):
        """End every rank of the job with exit status ``code`` (see ``abort_job``)."""
        abort_job(self.mpi, code)

    def barrier(self):
        """Wait until every rank got here."""
        self._collective.Barrier()

    def bcast(self, array, root=0):
        """Copy ``root``'s array into every rank's ``array`` (in place); returns it."""
        buffer = self._mpi_buffer(array, copy_in=self.rank == root)
        self._collective.Bcast(buffer, root=root)
        self._copy_back(array, buffer)
        return array

    def bcast_object(self, obj, root=0):
        """Broadcast a small picklable object (a config dict, fitted parameters)."""
        return self._collective.bcast(obj, root=root)

    def allgather_object(self, obj):
        """Every rank's small picklable ``obj`` (counters, shapes, a digest), in rank order."""
        return self._collective.allgather(obj)

    def allgather(self, array, out=None):
        """Every rank's ``array`` stacked in rank order: ``out[r]`` is rank r's; returns ``out``.

        ``out`` (made when None) has shape ``(size, *array.shape)`` and
        ``array``'s dtype; every rank must pass the same shape and dtype.
        """
        if out is None:
            out = backend.get_array_module(array).empty((self.size,) + array.shape, array.dtype)
        if out.shape != (self.size,) + array.shape or out.dtype != array.dtype:
            raise ValueError(f"allgather: out must have shape {(self.size,) + array.shape} and "
                             f"dtype {array.dtype} (one row per rank), got {out.shape} {out.dtype};"
                             " pass out=None to have it made")
        buffer = self._mpi_buffer(out, copy_in=False, reuse=False)
        self._collective.Allgather(self._mpi_buffer(array), buffer)
        self._copy_back(out, buffer)
        return out

    def ibarrier(self):
        """Start a barrier: the ``Request`` completes once every rank has called ``ibarrier``.

        Polled with ``test()``, sleeping in between, it waits for late ranks
        without taking the core that MPI's blocking ``barrier`` busy-polls.
        """
        return Request.of_mpi(None, self._collective.Ibarrier())

    def allreduce(self, array, op="sum", algorithm="auto"):
        """Sum (or average) ``array`` over all ranks, in place; returns it.

        ``algorithm``: ``"auto"`` or one of ``ALLREDUCE_ALGORITHMS``. Every
        rank must call with the same length, dtype, op and algorithm.
        """
        mean = _check_reduction(array, op)
        name = self.choose_algorithm(array, algorithm)
        divide_by = self.size if mean else None
        buffer = self._mpi_buffer(array)
        collectives.allreduce(self._collective, buffer, name, divide_by, self._scratch)
        self._copy_back(array, buffer)
        return array

    def iallreduce(self, array, op="sum", algorithm="auto"):
        """Start an allreduce and return a ``Request``; the result is in ``array`` after ``wait()``.

        ``"mpi"`` uses ``MPI_Iallreduce`` (with MPICH it progresses mostly inside
        ``test``/``wait`` unless ``MPICH_ASYNC_PROGRESS=1``). The hand-written
        algorithms run on one background thread (FIFO, on their own duplicate
        communicator, so the order of calls matches on every rank) when MPI
        grants ``THREAD_MULTIPLE``; otherwise they run at once and the request
        is already complete. A failure in the background is raised by ``wait()``.
        Do not touch ``array`` until the request completed.
        """
        mean = _check_reduction(array, op)
        name = self.choose_algorithm(array, algorithm)
        divide_by = self.size if mean else None
        if self.size == 1 or array.size == 0:
            return Request(self.allreduce(array, op, name))
        # CUDA-aware MPI_Iallreduce on device buffers crashes some Open MPI versions
        # (mpi4py issue 164): the library's own non-blocking allreduce always stages.
        buffer = self._mpi_buffer(array, reuse=False, device_ok=name != "mpi")
        if name == "mpi":
            MPI = mpi_module()
            request = self._collective.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)

            def finish():
                collectives.divide_in_place(buffer, divide_by)
                self._copy_back(array, buffer)
            return Request.of_mpi(array, request, finish)
        if not self.threaded:
            collectives.allreduce(self._collective, buffer, name, divide_by, self._scratch)
            self._copy_back(array, buffer)
            return Request(array)
        executor, comm, scratch = self._background_lane()
        future = executor.submit(_on_device_of, buffer, collectives.allreduce,
                                 comm, buffer, name, divide_by, scratch)
        request = Request(array, future.result, future.done, lambda: self._copy_back(array, buffer))
        future.add_done_callback(lambda _: request.mark_finished())
        return request

    def _background_lane(self):
        """The worker thread of ``iallreduce``, its communicator and scratch (made on first use)."""
        if self._background is None:
            self._background = (
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="minidl-iallreduce"),
                self._collective.Dup(), collectives.Scratch())
        return self._background

    def choose_algorithm(self, array, algorithm="auto"):
        """The algorithm ``allreduce`` runs for ``array``: ``algorithm``, or the pick for ``"auto"``.

        The pick is the same on every rank: the cost model's parameters are
        fitted once and broadcast from rank 0, and measurements take the
        maximum over ranks.
        """
        collectives.check_algorithm(algorithm)
        if algorithm != "auto":
            return algorithm
        if self.size == 1:
            return "mpi"
        if self.auto == "rule":
            return costmodel.choose_by_rule(array.nbytes)
        if self.auto == "measure":
            key = (array.nbytes, array.dtype.str, backend.device_of(array))
            if key not in self._measured:
                self._measured[key] = costmodel.choose_by_measurement(self, array)
            return self._measured[key]
        return costmodel.choose(array.nbytes, self.size, self.cost_params())

    def cost_params(self):
        """The fitted ``costmodel.CostParams`` of this communicator (fitted on first use)."""
        if self._cost_params is None:
            self._cost_params = costmodel.fit(self)
        return self._cost_params

    # ---- point to point ----------------------------------------------------------------
    def send(self, array, dest, tag=0):
        """Blocking send of an array to rank ``dest``."""
        self.mpi.Send(self._mpi_buffer(array), dest, tag)

    def recv(self, array, source, tag=0):
        """Blocking receive from rank ``source`` into ``array``; returns it."""
        buffer = self._mpi_buffer(array, copy_in=False)
        self.mpi.Recv(buffer, source, tag)
        self._copy_back(array, buffer)
        return array

    def sendrecv(self, send_array, dest, recv_array, source, sendtag=0, recvtag=0):
        """Send to ``dest`` and receive from ``source`` at once (no deadlock in rings)."""
        send_buffer = self._mpi_buffer(send_array)
        recv_buffer = self._mpi_buffer(recv_array, copy_in=False, reuse=False)
        self.mpi.Sendrecv(send_buffer, dest, sendtag, recv_buffer, source, recvtag)
        self._copy_back(recv_array, recv_buffer)
        return recv_array

    def isend(self, array, dest, tag=0):
        """Non-blocking send; do not modify ``array`` until the request completed."""
        buffer = self._mpi_buffer(array, reuse=False)
        return Request.of_mpi(array, self.mpi.Isend(buffer, dest, tag))

    def irecv(self, array, source, tag=0):
        """Non-blocking receive into ``array``; complete it with ``wait()``.

        The message may be shorter than ``array`` (a byte buffer sized for
        the largest message of a protocol): the rest of ``array`` is left as
        it was, so the message itself must say how long it is.
        """
        buffer = self._mpi_buffer(array, copy_in=False, reuse=False)
        return Request.of_mpi(array, self.mpi.Irecv(buffer, source, tag),
                              lambda: self._copy_back(array, buffer))

    def dup(self):
        """A communicator of the same ranks whose messages never match this one's (collective).

        A protocol run on its own duplicate (the parameter server's) cannot
        receive a message of other traffic that happens to use its tags.
        """
        return Communicator(self.mpi.Dup(), auto=self.auto)

    # ---- completing requests -------------------------------------------------------------
    @staticmethod
    def wait_any(requests):
        """Wait until one of ``requests`` is complete and return its index.

        A request that completed earlier counts at once (the first one), so
        replace a handled request (post the next ``irecv``) before waiting
        again. MPI operations are waited for in ``MPI_Waitany``, which
        busy-polls a core; when a background-thread request is among the
        pending ones, all are tested in turn instead.
        """
        requests = _requests("wait_any", requests)
        if not requests:
            raise ValueError("Communicator.wait_any: got no requests, so none can complete; "
                             "pass the pending Requests")
        for index, request in enumerate(requests):
            if request._done:
                return index
        if any(request._handle is None for request in requests):
            while True:
                for index, request in enumerate(requests):
                    if request.test():
                        return index
        index = mpi_module().Request.Waitany([request._handle for request in requests])
        requests[index]._complete()
        return index

    @staticmethod
    def test_some(requests):
        """The indices, in ascending order, of the ``requests`` complete now (maybe none).

        Never blocks: poll it, sleeping in between, to wait without spinning.
        """
        return [index for index, request in enumerate(_requests("test_some", requests))
                if request.test()]

    @staticmethod
    def wait_all(requests):
        """Wait until every one of ``requests`` is complete."""
        for request in _requests("wait_all", requests):
            request.wait()

    @staticmethod
    def test_all(requests):
        """True once every one of ``requests`` is complete (never blocks)."""
        return all(request.test() for request in _requests("test_all", requests))

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size}, auto={self.auto!r})"
