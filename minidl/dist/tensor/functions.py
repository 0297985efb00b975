"""Differentiable collectives: the communication of tensor parallelism as autograd ``Function``s.

A tensor on a group is *replicated* (the same on every rank) or *per-rank* (a block, or
a partial sum). Each backward is its forward's adjoint, ``<F x, y> = <x, F* y>``, for the
inner product that counts a replicated tensor once and sums per-rank tensors over the
ranks (Megatron-LM, Shoeybi et al. 2019, section 3: their f and g are
``copy_to_group`` and ``reduce_from_group``):

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

Rank r of p holds size_r = n // p + (r < n % p) elements of an axis, from offset
size_0 + ... + size_{r-1} (``Split``). Reduce-scatter is an allreduce, then this rank's block.

``class_parallel_cross_entropy`` (Megatron-LM's vocabulary-parallel cross-entropy): rank
r holds the logits z[:, block r]. With m_n = max_c z_nc, s_n = sum_c exp(z_nc - m_n) and
t_n = z[n, y_n] (an all-gather of the maxima, one allreduce of s and t), the loss is
mean_n (log s_n + m_n - t_n), replicated, and rank r's gradient is
(exp(z[:, block r] - m) / s - onehot(y)[:, block r]) / N: no rank holds all the logits.

``TRAFFIC`` counts the bytes each collective was handed on this rank (all-gather: the
largest block), the quantity ``minidl.perf.tensor_volume`` predicts.
"""

import dataclasses
from collections import Counter

from ...autograd import Function, Tensor
from ...backend import get_array_module, xp_for
from ...intmath import block_sizes

TRAFFIC = Counter()  # bytes handed to each kind of collective by this process


@dataclasses.dataclass(frozen=True)
class Split:
    """``n`` elements of one dimension over the ``parts`` ranks of a group, in rank order."""

    n: int
    parts: int

    @property
    def sizes(self) -> tuple:
        return block_sizes(self.n, self.parts)

    @property
    def offsets(self) -> tuple:
        sizes = self.sizes
        return tuple(sum(sizes[:r]) for r in range(self.parts))

    @property
    def largest(self) -> int:
        return self.sizes[0]

    def slice(self, rank: int) -> slice:
        start = self.offsets[rank]
        return slice(start, start + self.sizes[rank])


def take_block(array, axis, rank, parts):
    """Rank ``rank``'s block of ``array`` along ``axis`` over ``parts`` ranks (a copy)."""
    block = Split(array.shape[axis], parts).slice(rank)
    index = (slice(None),) * (axis % array.ndim) + (block,)
    return array[index].copy()


def gather_blocks(comm, block, axis, n):
    """Every rank's block along ``axis`` concatenated in rank order (``n`` elements in all);
    each block travels padded to the largest, in one ``allgather``."""
    xp = get_array_module(block)
    split = Split(n, comm.size)
    axis = axis % block.ndim
    if block.shape[axis] != split.sizes[comm.rank]:
        raise ValueError(
            f"gather_blocks: rank {comm.rank} holds {block.shape[axis]} elements along axis "
            f"{axis}, but {n} over {comm.size} ranks gives it {split.sizes[comm.rank]}"
        )
    rows = xp.moveaxis(block, axis, 0)
    padded = xp.zeros((split.largest,) + rows.shape[1:], dtype=block.dtype)
    padded[: rows.shape[0]] = rows
    everyone = comm.allgather(padded)
    whole = xp.concatenate([everyone[r, :size] for r, size in enumerate(split.sizes)])
    return xp.ascontiguousarray(xp.moveaxis(whole, 0, axis))


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
    TRAFFIC["allgather"] += block.nbytes // max(block.shape[axis], 1) * Split(n, comm.size).largest
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


class GatherFromGroup(AllGather):
    def backward(self, g):
        return _own_block(self.comm, g, self.axis)


class SplitToGroup(Function):
    def forward(self, x, comm, axis):
        self.comm, self.axis, self.n = comm, axis, x.shape[axis]
        return _own_block(comm, x, axis)

    def backward(self, g):
        return _all_gather(self.comm, g, self.axis, self.n)


class ReduceScatter(SplitToGroup):
    def forward(self, x, comm, axis):
        return super().forward(_allreduce(comm, x), comm, axis)


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


class ClassParallelCrossEntropy(Function):
    def forward(self, z, labels, comm, classes):
        xp = get_array_module(z)
        n = z.shape[0]
        block = Split(classes, comm.size).slice(comm.rank)
        if z.shape[1] != block.stop - block.start:
            raise ValueError(
                f"class_parallel_cross_entropy: rank {comm.rank} holds {z.shape[1]} classes, "
                f"but {classes} classes over {comm.size} ranks gives it {block.stop - block.start}"
            )
        local_max = z.max(axis=1)
        if comm.size > 1:
            TRAFFIC["allgather"] += local_max.nbytes
            m = comm.allgather(local_max).max(axis=0)
        else:
            m = local_max
        e = xp.exp(z - m[:, None])
        mine = (labels >= block.start) & (labels < block.stop)
        self.onehot = xp.zeros_like(z)
        self.onehot[xp.arange(n)[mine], labels[mine] - block.start] = 1
        sums = xp.stack([e.sum(axis=1), (z * self.onehot).sum(axis=1)])
        if comm.size > 1:
            TRAFFIC["allreduce"] += sums.nbytes
            comm.allreduce(sums, op="sum")
        s, t = sums
        self.p = e / s[:, None]
        return xp.asarray((xp.log(s) + m - t).mean(), dtype=z.dtype)

    def backward(self, g):
        return (self.p - self.onehot) * (g / self.p.shape[0])


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


def class_parallel_cross_entropy(logits: Tensor, labels, comm, classes: int) -> Tensor:
    """Mean cross-entropy of ``logits`` (this rank's block of the ``classes``) and int labels."""
    labels = labels.data if isinstance(labels, Tensor) else labels
    return ClassParallelCrossEntropy.apply(logits, labels=labels, comm=comm, classes=classes)
