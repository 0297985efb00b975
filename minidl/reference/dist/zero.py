"""ZeRO in textbook form: the stage-1 step on a flat vector, and stage 3's gather-compute-free
layer (Rajbhandari et al. 2020, ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models, §5 and §7).

Data parallelism keeps on each of P ranks all Ψ weights, their gradient and the optimizer's
state (K Ψ numbers: momentum K = 1, Adam K = 2). ZeRO cuts the flat vector into P shards,
rank r owning the elements [s_r, e_r) of ``minidl.intmath.block_bounds(Ψ, P)`` (sizes differ
by at most one, the first Ψ mod P shards one longer), and keeps on rank r only what its shard
needs.

**Stage 1** (P_os, §5.1): the optimizer state of the shard only. From each rank's gradient g_i
of its own batch, a step is

    g_r = (1/P) sum_i g_i[s_r:e_r]              reduce-scatter: rank r receives its shard
    w[s_r:e_r] <- update(w[s_r:e_r], g_r, state_r)
    w = w[s_0:e_0] | ... | w[s_(P-1):e_(P-1)]     all-gather of the updated shards

An allreduce is a reduce-scatter then an all-gather, so this moves the bytes of plain data
parallelism (2Ψ, §7.2) and holds Ψ weights, Ψ gradients and K Ψ / P of state, not (2 + K) Ψ.

**Stage 3** (P_os+g+p, §5.3): the parameters too live as shards only. A layer gathers its
parameters just before it computes, in forward and again in backward, and frees them after;
backward reduce-scatters the layer's gradient, so each rank keeps the mean of its shard:

    forward:   θ = all-gather(θ_r);  y = x W^T + b;  free θ
    backward:  θ = all-gather(θ_r);  dx = dy W;
               grad_r = (1/P) sum_i (dW_i | db_i)[s_r:e_r]   (reduce-scatter);  free θ

with θ = W.ravel() | b, dW = dy^T x and db = sum_n dy. A rank holds (2 + K) Ψ / P plus one
gathered layer at a time, for 3Ψ moved a step instead of 2Ψ (§7.2.2).

An exercise region here must not call the tuned ZeRO (``minidl.dist.zero``,
``minidl.dist.zero_layers``): the check fails one that does, since the exercise is to write
the algorithm out.
"""

from minidl.backend import get_array_module
from minidl.intmath import block_bounds, block_sizes


def zero1_step(comm, weights, grad, state, update):
    """One ZeRO-1 step: ``weights`` (flat, the same on every rank) updated in place from this
    rank's ``grad`` (flat, the gradient of its batch); returns ``weights``.

    ``update(w, g, state)`` is the rule, in place on ``w`` with its state arrays in the dict
    ``state``, made lazily (every minidl optimizer's ``update`` method, e.g.
    ``optim.Momentum(params, lr).update``): it sees this rank's shard only, so ``state``
    holds the state of the shard and no more.
    """
    xp = get_array_module(weights)
    # BEGIN EXERCISE 15.1
    counts = block_sizes(weights.size, comm.size)
    start, stop = block_bounds(weights.size, comm.size)[comm.rank]
    shard_grad = xp.empty(counts[comm.rank], dtype=grad.dtype)
    comm.reduce_scatter(grad, counts, shard_grad, op="mean")
    update(weights[start:stop], shard_grad, state)
    comm.allgatherv(weights, counts)
    # END EXERCISE 15.1
    return weights


class ShardedLinear:
    """y = x W^T + b whose parameters θ = W.ravel() | b exist between calls only as this
    rank's shard ``shard``; ``backward`` leaves the shard of the gradient (the mean over the
    ranks, each of its own batch) in ``grad``. An update rule then updates ``shard`` alone."""

    def __init__(self, comm, weight, bias):
        xp = get_array_module(weight)
        self.comm, self.weight_shape = comm, weight.shape
        theta = xp.concatenate([weight.reshape(-1), bias])
        self.counts = block_sizes(theta.size, comm.size)
        start, stop = block_bounds(theta.size, comm.size)[comm.rank]
        self.shard = theta[start:stop].copy()  # a copy: a view would keep all of θ alive
        self.grad = None

    def unflatten(self, theta):
        """(W, b): views of the gathered flat ``theta``."""
        out, inputs = self.weight_shape
        return theta[: out * inputs].reshape(out, inputs), theta[out * inputs :]

    def gather(self):
        """θ whole, in a new array: every rank's shard, all-gathered."""
        xp = get_array_module(self.shard)
        # BEGIN EXERCISE 15.2
        theta = xp.empty(sum(self.counts), dtype=self.shard.dtype)
        start = sum(self.counts[: self.comm.rank])
        theta[start : start + self.shard.size] = self.shard
        return self.comm.allgatherv(theta, self.counts)
        # END EXERCISE 15.2

    def forward(self, x):
        """y = x W^T + b, with W and b gathered for this call and freed when it returns."""
        # BEGIN EXERCISE 15.2
        weight, bias = self.unflatten(self.gather())
        return x @ weight.T + bias
        # END EXERCISE 15.2

    def backward(self, x, dy):
        """dL/dx = dy W for this rank's ``x``; this rank's shard of the mean over the ranks of
        (dW | db) into ``grad``. W is gathered again, and freed when it returns."""
        xp = get_array_module(dy)
        # BEGIN EXERCISE 15.2
        weight, _ = self.unflatten(self.gather())
        local = xp.concatenate([(dy.T @ x).reshape(-1), dy.sum(axis=0)])
        self.grad = xp.empty_like(self.shard)
        self.comm.reduce_scatter(local, self.counts, self.grad, op="mean")
        return dy @ weight
        # END EXERCISE 15.2
