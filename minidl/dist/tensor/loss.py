"""Softmax cross-entropy over logits whose classes are split over the ranks of a group.

Rank r holds the logits z[:, block r] of its classes (``Partition`` of C). With
m_n = max_c z_nc (the maximum of the ranks' maxima), s_n = sum_c exp(z_nc - m_n)
(an allreduce) and t_n = z[n, y_n] (held by one rank; an allreduce of the others'
zeros), the loss is l = mean_n (log s_n + m_n - t_n) and its gradient on rank r
is (exp(z[:, block r] - m) / s - onehot(y)[:, block r]) / N, computed where the
logits are, so the whole logit matrix never exists on one rank (Megatron-LM's
vocabulary-parallel cross-entropy, Shoeybi et al. 2019). The loss is replicated.
"""

from ...autograd import Function, Tensor
from ...backend import get_array_module
from .functions import TRAFFIC
from .partition import Partition


class ClassParallelCrossEntropy(Function):
    def forward(self, z, labels, comm, classes):
        xp = get_array_module(z)
        n = z.shape[0]
        block = Partition(classes, comm.size).slice(comm.rank)
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


def class_parallel_cross_entropy(logits: Tensor, labels, comm, classes: int) -> Tensor:
    """Mean cross-entropy of ``logits`` (this rank's block of the ``classes``) and int labels."""
    labels = labels.data if isinstance(labels, Tensor) else labels
    return ClassParallelCrossEntropy.apply(logits, labels=labels, comm=comm, classes=classes)
