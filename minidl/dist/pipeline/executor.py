"""Run one rank's pipeline instruction list over a ``Communicator``.

Sends are ``isend``s, completed at the batch's end. A gradient's receive is posted as
soon as its output has been sent on (same shape and dtype), so it can land while the
stage computes other micro-batches. An activation travels as a header (dtype, shape)
then the array, received blocking by ``recv_act`` right before the forward that needs it.

Loss scaling: micro-batch m holds n_m of the batch's N rows and its loss is their mean,
so L = sum_m (n_m / N) * L_m is the batch mean and the accumulated gradient
sum_m (n_m / N) * dL_m/dw the full-batch gradient; ``step`` updates once per batch.

Asynchronous lists (PipeDream) ``step`` after every backward, on that micro-batch's
unscaled gradient. Weight stashing: a forward leaves the arrays it used to its autograd
graph and gives the stage copies to update; its backward puts them back while it runs,
so it differentiates the weights its forward saw. The updates in between are its
staleness (``staleness``).
"""

import time
from contextlib import contextmanager

import numpy as np

from minidl import backend
from minidl.autograd import Tensor
from minidl.perf import pipeline_timeline
from minidl.perf.pipeline_simulate import place_of, stage_of
from minidl.perf.telemetry import StalenessHistogram
from minidl.random import sample_rows

DTYPES = ("float16", "float32", "float64", "int64")
MAX_DIMS = 8
ACT, GRAD = 0, 1
HEADER, DATA = 0, 1
TAG_LIMIT = 32767  # the smallest MPI_TAG_UB the MPI standard allows


def message_tag(kind, micro_batch, chunk, chunks, part=DATA):
    """Tag of a message to the receiver's ``chunk``: unique per (kind, micro-batch, chunk, part)."""
    return ((micro_batch * chunks + chunk) * 2 + kind) * 2 + part


def check_tag_room(micro_batches, chunks):
    """Refuse more messages per batch than MPI tags can tell apart."""
    if message_tag(GRAD, micro_batches - 1, chunks - 1, chunks, DATA) > TAG_LIMIT:
        raise ValueError(
            f"{micro_batches} micro-batches x {chunks} chunks need more message tags than "
            f"MPI guarantees ({TAG_LIMIT}); use at most {TAG_LIMIT // (4 * chunks)} micro-batches"
        )


def _header(array):
    if array.dtype.name not in DTYPES or array.ndim > MAX_DIMS:
        raise ValueError(
            f"a pipeline stage sent a {array.dtype} array of {array.ndim} dimensions; "
            f"activations must be {', '.join(DTYPES)} with at most {MAX_DIMS} dimensions"
        )
    header = np.zeros(2 + MAX_DIMS, dtype=np.int64)
    header[0], header[1] = DTYPES.index(array.dtype.name), array.ndim
    header[2 : 2 + array.ndim] = array.shape
    return header


def _empty_for(header, xp):
    """An uninitialised array of the dtype and shape ``header`` describes."""
    dtype, ndim = DTYPES[int(header[0])], int(header[1])
    return xp.empty(tuple(int(d) for d in header[2 : 2 + ndim]), dtype=dtype)


def send_array(comm, array, dest, tag=0):
    """Blocking send of ``array`` to a ``recv_array``: its header (dtype, shape), then its data."""
    xp = backend.get_array_module(array)
    comm.send(_header(array), dest, tag)
    comm.send(xp.ascontiguousarray(array), dest, tag)


def recv_array(comm, source, tag=0, xp=np):
    """The array a ``send_array`` from ``source`` sends (messages of one tag arrive in order)."""
    header = comm.recv(np.empty(2 + MAX_DIMS, np.int64), source, tag)
    return comm.recv(_empty_for(header, xp), source, tag)


class PipelineExecutor:
    """Runs a rank's instruction list for one batch on its model chunks.

    ``chunks[c]`` is the module of stage ``c * P + rank``; ``optimizer``: None when the
    rank holds no parameters; ``loss_fn(output, target)`` must return the mean over its
    micro-batch; ``metric(output, target)``: summed by the last stage into ``metric_sum``;
    ``stash``: weight stashing, for lists that update after every backward.
    """

    def __init__(self, comm, chunks, optimizer, loss_fn, metric=None, stash=False):
        self.comm, self.chunks, self.optimizer, self.loss_fn = comm, chunks, optimizer, loss_fn
        self.metric, self.stash = metric, stash
        self.version, self.staleness = 0, StalenessHistogram()
        self._seen, self._stashed = {}, {}
        self._tracer, self._trace_skip, self._trace_steps = None, 0, 0
        self.batches = 0  # batches run so far
        self.failure = None  # an update refused in the last batch
        self.ranks, self.rank = comm.size, comm.rank
        self.last_stage = self.ranks * len(chunks) - 1

    def trace(self, tracer, skip=0, steps=0):
        """Record the instructions of ``steps`` batches after ``skip`` more into ``tracer``
        (``pipeline_timeline.record``); ``tracer`` None: stop."""
        self._tracer, self._trace_skip, self._trace_steps = tracer, skip, steps

    def run(self, program, inputs, targets, shares):
        """Run ``program`` on ``inputs[m]``, ``targets[m]`` with ``shares[m] = n_m / N``; the
        summed scaled loss (0 off the last stage). An update refused for a non-finite
        gradient goes to ``failure``: the list goes on, as the neighbours wait for it."""
        self._inputs, self._outputs, self._received, self._sent = {}, {}, {}, []
        self._posted = {}  # (m, chunk): the gradient's receive, posted by _send_act
        self._batch = (inputs, targets, shares)
        self._starts = np.cumsum([0, *map(len, targets)]).tolist()  # each micro-batch's rows
        self.loss = self.metric_sum = 0.0
        self.failure = None
        tracer = self._tracer if self._trace_skip == 0 and self._trace_steps > 0 else None
        if self._tracer is not None:
            self._trace_steps -= tracer is not None
            self._trace_skip = max(0, self._trace_skip - 1)
        for instruction in program:
            start = time.perf_counter()
            getattr(self, "_" + instruction.op)(instruction.micro_batch, instruction.chunk)
            if tracer is not None:
                pipeline_timeline.record(
                    tracer, instruction, start, time.perf_counter(), self.batches
                )
        self.comm.wait_all(self._sent)
        self._sent = []
        self.batches += 1
        return self.loss

    def step_only(self):
        """The update of a batch this replica has no rows of (it still joins the average)."""
        self.failure = None
        self._step(0, 0)

    def _stage(self, chunk):
        return stage_of(self.rank, chunk, self.ranks)

    def _peer(self, chunk, step):
        """(rank, chunk) of the stage ``step`` away from this rank's ``chunk``."""
        return place_of(self._stage(chunk) + step, self.ranks)

    def _tag(self, kind, m, chunk, part=DATA):
        return message_tag(kind, m, chunk, len(self.chunks), part)

    # ---- messages -------------------------------------------------------------------
    def _isend(self, array, rank, tag):
        self._sent.append(self.comm.isend(array, rank, tag))

    def _send_act(self, m, c):
        out = self._outputs[m, c].data
        rank, chunk = self._peer(c, +1)
        xp = backend.get_array_module(out)
        self._isend(_header(out), rank, self._tag(ACT, m, chunk, HEADER))
        self._isend(xp.ascontiguousarray(out), rank, self._tag(ACT, m, chunk))
        gradient = xp.empty(out.shape, out.dtype)
        self._posted[m, c] = self.comm.irecv(gradient, rank, self._tag(GRAD, m, c))

    def _recv_act(self, m, c):
        rank, _ = self._peer(c, -1)
        header = self.comm.recv(
            np.empty(2 + MAX_DIMS, np.int64), rank, self._tag(ACT, m, c, HEADER)
        )
        buffer = _empty_for(header, self._array_module())
        self._received[m, c] = self.comm.recv(buffer, rank, self._tag(ACT, m, c))

    def _send_grad(self, m, c):
        grad = self._inputs.pop((m, c)).grad
        rank, chunk = self._peer(c, -1)
        self._isend(grad, rank, self._tag(GRAD, m, chunk))

    def _recv_grad(self, m, c):
        self._received[m, c] = self._posted.pop((m, c)).wait()

    # ---- compute --------------------------------------------------------------------
    def _forward(self, m, c):
        inputs, targets, shares = self._batch
        stage = self._stage(c)
        if stage == 0:
            x = Tensor(inputs[m])
        else:
            x = Tensor(self._received.pop((m, c)), requires_grad=True)
        with sample_rows(self._starts[m], self._starts[m + 1]):  # its samples' dropout masks
            out = self.chunks[c](x)
        if stage == self.last_stage:
            if self.metric is not None:
                self.metric_sum += float(self.metric(out.data, targets[m]))
            loss = self.loss_fn(out, targets[m])
            self.loss += float(loss.item()) * shares[m]
            out = loss if self.stash else loss * shares[m]
        self._inputs[m, c], self._outputs[m, c] = x, out
        self._seen[m, c] = self.version
        if self.stash:  # the graph keeps the arrays it used; the stage updates copies
            params = list(self.chunks[c].parameters())
            self._stashed[m, c] = [p.data for p in params]
            for p in params:
                p.data = p.data.copy()

    def _backward(self, m, c):
        out = self._outputs.pop((m, c))
        grad = None if self._stage(c) == self.last_stage else self._received.pop((m, c))
        self.staleness.add(self.version - self._seen.pop((m, c)))
        stashed = self._stashed.pop((m, c), None)
        if out.requires_grad:  # False only for a first stage without parameters
            with _stashed_weights(list(self.chunks[c].parameters()), stashed):
                out.backward(grad)
        x = self._inputs[m, c]
        if self._stage(c) == 0:
            del self._inputs[m, c]
        elif x.grad is None:  # the stage ignored its input
            x.grad = backend.get_array_module(x.data).zeros_like(x.data)

    def _step(self, m, c):
        self.version += 1
        if self.optimizer is not None:
            try:
                self.optimizer.step()
            except ArithmeticError as exc:  # a non-finite averaged gradient (data parallel)
                self.failure = self.failure or exc
            self.optimizer.zero_grad()

    def _array_module(self):
        for chunk in self.chunks:
            for p in chunk.parameters():
                return backend.get_array_module(p.data)
        return np


@contextmanager
def _stashed_weights(params, arrays):
    """``params`` hold ``arrays`` (a stashed version) inside the block, their own after it;
    ``arrays`` None: their own throughout."""
    if arrays is None:
        yield
        return
    live = [p.data for p in params]
    for p, array in zip(params, arrays):
        p.data = array
    try:
        yield
    finally:
        for p, array in zip(params, live):
            p.data = array
