"""Differentiable collectives: the communication of model parallelism as autograd ``Function``s.

A tensor on the ranks of a group is either *replicated* (one value that every
rank holds alike) or *per-rank* (each rank its own: a block of a split tensor,
or a partial sum). The adjoint of each map below is taken for the inner product
that counts a replicated tensor once and sums per-rank tensors over the ranks,
so that ``<F x, y> = <x, F* y>`` and backward computes ``F*`` (Megatron-LM,
Shoeybi et al. 2019, section 3: their f and g are ``copy_to_group`` and
``reduce_from_group``):

=====================  ==========================  ============================
function               forward                     backward (the adjoint)
=====================  ==========================  ============================
``copy_to_group``      identity (replicated in)    allreduce (sum)
``reduce_from_group``  allreduce (sum)             identity (replicated out)
``all_gather``         all-gather of blocks        reduce-scatter
``reduce_scatter``     reduce-scatter              all-gather
``gather_from_group``  all-gather, replicated out  this rank's block
``split_to_group``     this rank's block           all-gather
``send`` / ``recv``    point to point a -> b       point to point b -> a
=====================  ==========================  ============================

Blocks along an axis follow ``Partition`` (uneven sizes allowed). Reduce-scatter
is an allreduce followed by taking this rank's block. ``TRAFFIC`` counts the
bytes each collective was handed on this rank (allreduce: the array; all-gather:
the padded block; send: the array), the quantity ``minidl.perf.tensor_volume``
predicts.
"""

from collections import Counter

from ...autograd import Function, Tensor
from ...backend import get_array_module, xp_for
from .partition import gather_blocks, take_block

TRAFFIC = Counter()  # bytes handed to each kind of collective by this process


def _allreduce(comm, array):
    """The sum over ``comm`` of ``array`` (a new array; the input is left alone)."""
    out = array.copy()
    if comm.size > 1:
        TRAFFIC["allreduce"] += out.nbytes
        comm.allreduce(out, op="sum")
    return out


def _all_gather(comm, block, axis, n):
    if comm.size == 1:
        return block.copy()
    TRAFFIC["allgather"] += block.nbytes // max(block.shape[axis], 1) * -(-n // comm.size)
    return gather_blocks(comm, block, axis, n)


def _own_block(comm, array, axis):
    return take_block(array, axis, comm.rank, comm.size)


class CopyToGroup(Function):
    def forward(self, x, comm):
        self.comm = comm
        return x

    def backward(self, g):
        return _allreduce(self.comm, g)


class ReduceFromGroup(Function):
    def forward(self, x, comm):
        return _allreduce(comm, x)

    def backward(self, g):
        return g


class AllGather(Function):
    def forward(self, x, comm, axis, n):
        self.comm, self.axis = comm, axis
        return _all_gather(comm, x, axis, n)

    def backward(self, g):
        return _own_block(self.comm, _allreduce(self.comm, g), self.axis)


class ReduceScatter(Function):
    def forward(self, x, comm, axis):
        self.comm, self.axis, self.n = comm, axis, x.shape[axis]
        return _own_block(comm, _allreduce(comm, x), axis)

    def backward(self, g):
        return _all_gather(self.comm, g, self.axis, self.n)


class GatherFromGroup(Function):
    def forward(self, x, comm, axis, n):
        self.comm, self.axis = comm, axis
        return _all_gather(comm, x, axis, n)

    def backward(self, g):
        return _own_block(self.comm, g, self.axis)


class SplitToGroup(Function):
    def forward(self, x, comm, axis):
        self.comm, self.axis, self.n = comm, axis, x.shape[axis]
        return _own_block(comm, x, axis)

    def backward(self, g):
        return _all_gather(self.comm, g, self.axis, self.n)


class Send(Function):
    """Sends ``x`` to ``dest``; the output is a 0-d zero whose backward receives x's gradient."""

    def forward(self, x, comm, dest, tag):
        self.comm, self.dest, self.tag, self.like = comm, dest, tag, x
        TRAFFIC["send"] += x.nbytes
        comm.send(x, dest, tag)
        return get_array_module(x).zeros((), dtype=x.dtype)

    def backward(self, g):
        xp = get_array_module(self.like)
        return self.comm.recv(xp.empty_like(self.like), self.dest, self.tag)


class Recv(Function):
    """Receives into an array like ``anchor``'s; backward sends the gradient back to ``source``."""

    def forward(self, anchor, comm, source, tag):
        self.comm, self.source, self.tag = comm, source, tag
        return comm.recv(get_array_module(anchor).empty_like(anchor), source, tag)

    def backward(self, g):
        TRAFFIC["send"] += g.nbytes
        self.comm.send(get_array_module(g).ascontiguousarray(g), self.source, self.tag)
        return get_array_module(g).zeros_like(g)


def copy_to_group(x: Tensor, comm) -> Tensor:
    """A replicated ``x`` entering per-rank work: identity forward, gradients summed backward."""
    return CopyToGroup.apply(x, comm=comm)


def reduce_from_group(x: Tensor, comm) -> Tensor:
    """The sum over ``comm`` of each rank's partial ``x`` (replicated); gradient passed as is."""
    return ReduceFromGroup.apply(x, comm=comm)


def all_gather(x: Tensor, comm, axis: int, n: int) -> Tensor:
    """Every rank's block of ``x`` along ``axis`` (``n`` in all), each rank's result its own."""
    return AllGather.apply(x, comm=comm, axis=axis, n=n)


def reduce_scatter(x: Tensor, comm, axis: int) -> Tensor:
    """This rank's block along ``axis`` of the sum over ``comm`` of every rank's ``x``."""
    return ReduceScatter.apply(x, comm=comm, axis=axis)


def gather_from_group(x: Tensor, comm, axis: int, n: int) -> Tensor:
    """Every rank's block of ``x`` along ``axis`` (``n`` in all), replicated."""
    return GatherFromGroup.apply(x, comm=comm, axis=axis, n=n)


def split_to_group(x: Tensor, comm, axis: int) -> Tensor:
    """This rank's block along ``axis`` of a replicated ``x``."""
    return SplitToGroup.apply(x, comm=comm, axis=axis)


def send(x: Tensor, comm, dest: int, tag: int = 0) -> Tensor:
    """Send ``x`` to ``dest``; call ``backward()`` on the result to receive x's gradient."""
    return Send.apply(x, comm=comm, dest=dest, tag=tag)


def recv(shape, dtype, comm, source: int, tag: int = 0, device: str = "cpu") -> Tensor:
    """The tensor ``source`` sent; its gradient goes back to ``source`` during backward."""
    anchor = Tensor(xp_for(device).zeros(shape, dtype=dtype), requires_grad=True)
    return Recv.apply(anchor, comm=comm, source=source, tag=tag)
