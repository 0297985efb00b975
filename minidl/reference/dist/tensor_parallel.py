"""Tensor parallelism in textbook form: Megatron's column/row pair, and the grid's communicators.

**The column/row pair** (Shoeybi et al. 2019, Megatron-LM, section 3). Two fully
connected layers y = tanh(x W1^T + b1) W2^T + b2 on P ranks: rank r holds the
rows W1_r, b1_r of the first layer (a block of its outputs: column-parallel) and
the matching columns W2_r of the second (a block of its inputs: row-parallel),
and every rank holds b2 and the whole input x. Then

    h_r = tanh(x W1_r^T + b1_r)                (no message: rank r's block of h)
    y   = sum_r h_r W2_r^T + b2                 (one allreduce forward)

and for the gradient g = dL/dy (the same on every rank)

    dW2_r = g^T h_r,  db2 = sum_n g,  da_r = (g W2_r) * (1 - h_r^2),
    dW1_r = da_r^T x, db1_r = sum_n da_r,
    dx    = sum_r da_r W1_r                     (one allreduce backward).

Each rank stores and computes 1/P of both layers; the pair costs one allreduce
of the output forward and one of the input gradient backward.

**The grid's communicators.** D*T ranks as a D x T grid, rank = d*T + t: the T
ranks of one model replica (same d) form a tensor-parallel group, the D ranks
holding the same block (same t) a data-parallel group. ``MPI_Comm_split`` puts
the ranks that give the same colour in one communicator, ordered by key.

An exercise region here must not call the tuned tensor parallelism (``minidl.dist.tensor``,
``minidl.dist.Grid``): the check fails one that does, since the exercise is to write the
algorithm out.
"""

import numpy as np

from minidl.dist.comm import Communicator


def column_row_forward(comm, x, w1, b1, w2, b2):
    """y of the pair, and the saved h_r; ``w1``, ``b1``, ``w2`` are this rank's blocks."""
    # BEGIN EXERCISE 11.1
    h = np.tanh(x @ w1.T + b1)
    y = comm.allreduce(h @ w2.T, op="sum") + b2
    # END EXERCISE 11.1
    return y, h


def column_row_backward(comm, x, w1, w2, h, g):
    """(dx, dW1_r, db1_r, dW2_r, db2) of the pair from g = dL/dy."""
    # BEGIN EXERCISE 11.2
    dw2, db2 = g.T @ h, g.sum(axis=0)
    da = (g @ w2) * (1 - h * h)
    dw1, db1 = da.T @ x, da.sum(axis=0)
    dx = comm.allreduce(da @ w1, op="sum")
    # END EXERCISE 11.2
    return dx, dw1, db1, dw2, db2


def grid_groups(comm, dp, tp):
    """(data-parallel group, tensor-parallel group) of this rank on a dp x tp grid."""
    # BEGIN EXERCISE 11.3
    d, t = divmod(comm.rank, tp)
    tp_group = comm.mpi.Split(color=d, key=t)
    dp_group = comm.mpi.Split(color=t, key=d)
    # END EXERCISE 11.3
    return Communicator(dp_group), Communicator(tp_group)
