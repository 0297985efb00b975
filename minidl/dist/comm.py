"""The MPI communicator of minidl: ``comm = md.dist.init()``.

A thin layer over mpi4py's buffer calls (``Send``, ``Allreduce``...) for NumPy and CuPy
arrays, never the pickle-based lower-case ones, ~10x slower on large arrays (small
Python objects may use ``bcast_object`` and ``allgather_object``). The rest of
``minidl.dist`` talks to MPI through a ``Communicator`` and its ``Request`` objects.
"""

import concurrent.futures
import time

import numpy as np

from minidl import backend
from minidl.dist import collectives
from minidl.dist.job import abort_if_peer_failed, abort_job, install_abort_hooks, mpi_module
from minidl.dist.staging import Staging, cuda_aware_mpi

OPS = ("sum", "mean")

_world = None


def init(auto: str = "rule") -> "Communicator":
    """Initialise MPI once (with ``job.install_abort_hooks``); returns the world ``Communicator``.
    ``auto``: how ``algorithm="auto"`` picks (``AutoChoice``); a second call only changes it."""
    global _world
    if _world is None:
        MPI = mpi_module()
        install_abort_hooks(MPI.COMM_WORLD)
        _world = Communicator(MPI.COMM_WORLD, auto=auto)
    else:
        _world.auto = auto
    return _world


def world():
    """The world ``Communicator`` if ``init()`` ran in this process, else None."""
    return _world


def _check_reduction(array, op, size):
    """The divisor of the reduction (None for a sum); rejects what cannot be reduced in place."""
    if op not in OPS:
        raise ValueError(f"allreduce: unknown op {op!r}; choose one of {', '.join(OPS)}")
    if not (array.flags.c_contiguous and array.dtype.kind in "fiuc"):
        raise ValueError(
            f"allreduce works in place on C-contiguous numeric arrays, got dtype {array.dtype}"
            f" (contiguous={array.flags.c_contiguous}); reduce y = np.ascontiguousarray(x) and"
            " copy it back"
        )
    if op == "mean" and array.dtype.kind not in "fc":
        raise ValueError(
            f"allreduce(op='mean') needs a float array, got {array.dtype}; "
            "use op='sum' and divide, or cast to a float dtype"
        )
    return size if op == "mean" else None


def _on_device_of(array, function, *args):
    """Run ``function(*args)`` with ``array``'s GPU current (a new thread starts on GPU 0)."""
    if isinstance(array, np.ndarray):
        return function(*args)
    with array.device:
        return function(*args)


class Request:
    """A pending operation: ``wait()`` finishes it and returns its array, ``test()`` polls.

    ``finish`` (copy a staged result back, divide a mean) runs once, in the thread that
    calls ``wait``/``test``. ``handle``: the mpi4py request of an MPI operation (None on
    the background thread or when done at once), for ``MPI_Waitany`` in ``wait_any``.
    """

    def __init__(self, result, wait=None, test=None, finish=None, handle=None):
        self._result, self._handle = result, handle
        self._wait, self._test, self._finish = wait, test, finish
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
        """Withdraw a pending receive that no message will match (then it counts as complete;
        its array is undefined). Only MPI operations can be withdrawn; a finished one stays."""
        if self._done:
            return
        if self._handle is None:
            raise ValueError(
                "Request.cancel: this request runs on minidl's background thread "
                "(a hand-written iallreduce) and cannot be withdrawn; wait() for it"
            )
        self._handle.Cancel()
        self._complete()


def _requests(what, requests):
    """``requests`` as a list, or an error naming what to pass instead."""
    requests = list(requests)
    for request in requests:
        if not isinstance(request, Request):
            raise TypeError(
                f"Communicator.{what}: expected minidl Requests (what isend, irecv, "
                f"ibarrier and iallreduce return), got {type(request).__name__}; "
                "start the operation through the Communicator"
            )
    return requests


class Communicator:
    """A group of MPI ranks exchanging NumPy/CuPy arrays.

    Collectives run on a duplicate of the MPI communicator, so their messages never match
    a user's ``send``/``recv``; a point-to-point protocol gets its own from ``dup()``.
    ``.mpi`` is the wrapped mpi4py communicator.
    """

    def __init__(self, mpi_comm, auto="rule"):
        MPI = mpi_module()
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()
        self._auto = collectives.AutoChoice(auto, collectives.SEGMENT_BYTES)
        self._staging = Staging(cuda_aware_mpi(mpi_comm))
        self.threaded = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self._collective = mpi_comm.Dup()
        self._scratch = collectives.Scratch()
        self._background = None

    @property
    def auto(self):
        """How ``algorithm="auto"`` picks: ``"rule"``, ``"measure"`` or ``"model"`` (settable)."""
        return self._auto.mode

    @auto.setter
    def auto(self, mode):
        self._auto.mode = mode

    # ---- collectives -------------------------------------------------------------------
    def abort(self, code=1):
        """End every rank of the job with exit status ``code`` (see ``abort_job``)."""
        abort_job(self.mpi, code)

    def abort_if_peer_failed(self, exc, option=str):
        """End the job, naming the dead ranks and hosts, if ``exc`` is MPI's report that a
        peer's process failed; else return (see ``job.abort_if_peer_failed``)."""
        abort_if_peer_failed(exc, option)

    def barrier(self) -> None:
        """Wait until every rank got here."""
        self._collective.Barrier()

    def bcast(self, array, root: int = 0):
        """Copy ``root``'s array into every rank's ``array`` (in place); returns it."""
        buffer = (self._staging.outgoing if self.rank == root else self._staging.incoming)(array)
        self._collective.Bcast(buffer, root=root)
        self._staging.copy_back(array, buffer)
        return array

    def bcast_object(self, obj, root=0):
        """Broadcast a small picklable object (a config dict, fitted parameters)."""
        return self._collective.bcast(obj, root=root)

    def allgather_object(self, obj):
        """Every rank's small picklable ``obj`` (counters, shapes, a digest), in rank order."""
        return self._collective.allgather(obj)

    def allgather(self, array, out=None):
        """Every rank's ``array`` stacked in rank order: ``out[r]`` is rank r's; returns ``out``
        (made when None), of shape ``(size, *array.shape)`` and ``array``'s dtype."""
        if out is None:
            out = backend.get_array_module(array).empty((self.size,) + array.shape, array.dtype)
        if out.shape != (self.size,) + array.shape or out.dtype != array.dtype:
            raise ValueError(
                f"allgather: out must have shape {(self.size,) + array.shape} and "
                f"dtype {array.dtype} (one row per rank), got {out.shape} {out.dtype};"
                " pass out=None to have it made"
            )
        buffer = self._staging.incoming(out)
        self._collective.Allgather(self._staging.outgoing(array), buffer)
        self._staging.copy_back(out, buffer)
        return out

    def reduce_scatter(self, array, counts, out=None, op="sum"):
        """Sum (``op="mean"``: average) ``array`` over the ranks; rank r gets the ``counts[r]``
        elements that follow the first ``sum(counts[:r])`` of the result (``MPI_Reduce_scatter``)
        into ``out``, or (``out`` None) into the first ``counts[r]`` of ``array`` itself
        (``MPI_IN_PLACE``: no memory for them); returns them."""
        if op not in ("sum", "mean") or len(counts) != self.size or sum(counts) != array.size:
            raise ValueError(
                f"reduce_scatter: op {op!r} (sum or mean) and {len(counts)} counts summing to "
                f"{sum(counts)} for {self.size} ranks and an array of {array.size} elements"
            )
        MPI, counts = mpi_module(), [int(c) for c in counts]
        if out is None:
            buffer = self._staging.outgoing(array)
            self._collective.Reduce_scatter(MPI.IN_PLACE, buffer, counts, op=MPI.SUM)
            self._staging.copy_back(array, buffer)
            out = array.reshape(-1)[: counts[self.rank]]
        else:
            buffer = self._staging.incoming(out)
            self._collective.Reduce_scatter(self._staging.outgoing(array), buffer, counts, MPI.SUM)
            self._staging.copy_back(out, buffer)
        collectives.divide_in_place(out, self.size if op == "mean" else None)
        return out

    def allgatherv(self, array, counts):
        """Rank r's block of the flat ``array`` (its ``counts[r]`` elements after the first
        ``sum(counts[:r])``) copied to every rank, in place (``MPI_Allgatherv``); returns it."""
        if len(counts) != self.size or sum(counts) != array.size:
            raise ValueError(
                f"allgatherv: {len(counts)} counts summing to {sum(counts)} for {self.size} "
                f"ranks and an array of {array.size} elements"
            )
        MPI = mpi_module()
        buffer = self._staging.outgoing(array)
        counts = [int(c) for c in counts]
        displacements = [sum(counts[:r]) for r in range(self.size)]
        self._collective.Allgatherv(MPI.IN_PLACE, [buffer, (counts, displacements)])
        self._staging.copy_back(array, buffer)
        return array

    def ibarrier(self):
        """Start a barrier: the ``Request`` completes once every rank has called ``ibarrier``
        (poll it with ``test()``, sleeping in between, to wait without busy-polling a core)."""
        return Request.of_mpi(None, self._collective.Ibarrier())

    def allreduce(self, array, op: str = "sum", algorithm: str = "auto"):
        """Sum (or average) ``array`` over all ranks, in place; returns it. Every rank calls with
        the same length, dtype, op and ``algorithm`` (``"auto"`` or ``ALLREDUCE_ALGORITHMS``)."""
        divide_by = _check_reduction(array, op, self.size)
        name = self.choose_algorithm(array, algorithm)
        buffer = self._staging.outgoing(array)
        collectives.allreduce(self._collective, buffer, name, divide_by, self._scratch)
        self._staging.copy_back(array, buffer)
        return array

    def iallreduce(self, array, op="sum", algorithm="auto"):
        """Start an allreduce and return a ``Request``; the result is in ``array`` after ``wait()``.

        ``"mpi"`` uses ``MPI_Iallreduce`` (with MPICH it progresses mostly inside
        ``test``/``wait`` unless ``MPICH_ASYNC_PROGRESS=1``). The hand-written algorithms run
        in call order, the same on every rank, on one background thread with their own
        communicator when MPI grants ``THREAD_MULTIPLE``, else at once; ``wait()`` raises a
        background failure. Do not touch ``array`` until the request completed.
        """
        divide_by = _check_reduction(array, op, self.size)
        name = self.choose_algorithm(array, algorithm)
        if self.size == 1 or array.size == 0:
            return Request(self.allreduce(array, op, name))
        if name == "mpi":
            buffer = self._staging.host_copy(array)
            MPI = mpi_module()
            request = self._collective.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)

            def finish():
                collectives.divide_in_place(buffer, divide_by)
                self._staging.copy_back(array, buffer)

            return Request.of_mpi(array, request, finish)
        if not self.threaded:
            return Request(self.allreduce(array, op, name))
        buffer = self._staging.outgoing(array, pending=True)
        executor, comm, scratch = self._background_lane()
        future = executor.submit(
            _on_device_of, buffer, collectives.allreduce, comm, buffer, name, divide_by, scratch
        )
        request = Request(
            array, future.result, future.done, lambda: self._staging.copy_back(array, buffer)
        )
        future.add_done_callback(lambda _: request.mark_finished())
        return request

    def _background_lane(self):
        """The worker thread of ``iallreduce``, its communicator and scratch (made on first use)."""
        if self._background is None:
            self._background = (
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="minidl-iallreduce"),
                self._collective.Dup(),
                collectives.Scratch(),
            )
        return self._background

    def choose_algorithm(self, array, algorithm="auto"):
        """What ``allreduce`` runs: ``algorithm``, or the same pick on every rank for ``"auto"``."""
        collectives.check_algorithm(algorithm)
        return self._auto.choose(self, array) if algorithm == "auto" else algorithm

    def node_layout(self):
        """(nodes, most ranks on one node) of this communicator (collective the first time)."""
        split = collectives.node_split(self._collective)
        return split.nodes, split.largest

    def cost_params(self):
        """The ``CostParams`` fitted on this communicator (collective the first time)."""
        return self._auto.cost_params(self)

    # ---- point to point ----------------------------------------------------------------
    def send(self, array, dest, tag=0):
        """Blocking send of an array to rank ``dest``."""
        self.mpi.Send(self._staging.outgoing(array), dest, tag)

    def recv(self, array, source, tag=0):
        """Blocking receive from rank ``source`` into ``array``; returns it."""
        buffer = self._staging.incoming(array)
        self.mpi.Recv(buffer, source, tag)
        self._staging.copy_back(array, buffer)
        return array

    def send_object(self, obj, dest, tag=0):
        """Blocking send of a small picklable object (the layout of a state) to rank ``dest``."""
        self.mpi.send(obj, dest, tag)

    def recv_object(self, source, tag=0):
        """The object a ``send_object`` from rank ``source`` sent."""
        return self.mpi.recv(source=source, tag=tag)

    def sendrecv(self, send_array, dest, recv_array, source, sendtag=0, recvtag=0):
        """Send to ``dest`` and receive from ``source`` at once (no deadlock in rings)."""
        recv_buffer = self._staging.incoming(recv_array)
        self.mpi.Sendrecv(
            self._staging.outgoing(send_array), dest, sendtag, recv_buffer, source, recvtag
        )
        self._staging.copy_back(recv_array, recv_buffer)
        return recv_array

    def isend(self, array, dest, tag=0):
        """Non-blocking send; do not modify ``array`` until the request completed."""
        buffer = self._staging.outgoing(array, pending=True)
        return Request.of_mpi(array, self.mpi.Isend(buffer, dest, tag))

    def irecv(self, array, source, tag=0):
        """Non-blocking receive into ``array``; complete it with ``wait()``. A shorter message
        leaves the rest of ``array`` as it was, so it must say how long it is itself."""
        buffer = self._staging.incoming(array, pending=True)
        request = self.mpi.Irecv(buffer, source, tag)
        return Request.of_mpi(array, request, lambda: self._staging.copy_back(array, buffer))

    def dup(self):
        """A communicator of the same ranks whose messages never match this one's (collective)."""
        return Communicator(self.mpi.Dup(), auto=self.auto)

    def split(self, color: int, key: int) -> "Communicator":
        """The ranks that pass the same ``color``, ordered by ``key`` (collective; ``Split``)."""
        return Communicator(self.mpi.Split(color, key), auto=self.auto)

    def cartesian(self, extents) -> tuple:
        """These ranks as a grid of ``extents``, row-major, rank order kept (collective): this
        rank's coordinates and, per dimension, the ``Communicator`` of the ranks that differ
        from this one only along it (``Create_cart``, ``Sub``)."""
        dims = len(extents)
        cart = self.mpi.Create_cart(list(extents), periods=[False] * dims, reorder=False)
        coords = tuple(cart.Get_coords(cart.Get_rank()))
        groups = [
            Communicator(cart.Sub([other == axis for other in range(dims)]), auto=self.auto)
            for axis in range(dims)
        ]
        cart.Free()
        return coords, groups

    # ---- completing requests -------------------------------------------------------------
    @staticmethod
    def wait_any(requests):
        """Wait until one of ``requests`` is complete and return its index.

        One that completed earlier counts at once, so replace a handled request before
        waiting again. MPI operations wait in ``MPI_Waitany``, which busy-polls a core; with
        a background-thread request among them, all are tested in turn instead.
        """
        requests = _requests("wait_any", requests)
        if not requests:
            raise ValueError(
                "Communicator.wait_any: got no requests, so none can complete; "
                "pass the pending Requests"
            )
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
        """The indices, in ascending order, of the ``requests`` complete now (never blocks)."""
        requests = _requests("test_some", requests)
        return [index for index, request in enumerate(requests) if request.test()]

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
