"""Hierarchical allreduce: reduce within each node, allreduce among node leaders, broadcast.

Ranks of one node share memory; the network between nodes is slower. With N
nodes of q ranks (P = N q), the two-level allreduce (Thakur, Rabenseifner &
Gropp 2005 discuss such SMP-aware collectives; Jia et al. 2018 train this
way at scale) lets only one rank per node use the network:

1. each node sums its q arrays on its leader (its lowest rank), by MPI's
   ``Reduce`` on the node's shared-memory communicator (``COMM_TYPE_SHARED``);
2. the N leaders run the pipelined ``ring`` of ``collectives.py`` among
   themselves: 2 (N-1) network steps carrying 2 (N-1)/N m bytes per link,
   where a flat ring over all P ranks waits for a network message at each of
   its 2 (P-1) steps and carries 2 (P-1)/P m (``minidl/perf/level_cost.py``);
3. each leader broadcasts the result within its node (``Bcast``).

Every rank ends with its leader's bits, and the leaders with identical bits
(the ring computes each element on one rank), so all ranks agree. The
node and leader communicators are split once per communicator and cached on
it (an MPI attribute).
"""

from minidl.dist.collectives import Exchange, Scratch, divide_in_place, ready, ring
from minidl.dist.job import mpi_module

_KEYVAL = []  # the MPI attribute key under which a communicator keeps its NodeSplit


class NodeSplit:
    """``comm`` split by node: ``node`` (this node's ranks), ``leaders`` (node rank 0 of every
    node; None on other ranks), ``nodes`` and ``largest`` (the most ranks on one node)."""

    def __init__(self, comm):
        MPI = mpi_module()
        self.node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        leader = self.node.Get_rank() == 0
        split = comm.Split(0 if leader else MPI.UNDEFINED, key=comm.Get_rank())
        self.leaders = split if leader else None
        self.nodes = comm.allreduce(int(leader))
        self.largest = comm.allreduce(self.node.Get_size(), op=MPI.MAX)
        self.scratch = Scratch()


def node_split(comm):
    """The cached ``NodeSplit`` of the mpi4py communicator ``comm`` (collective the first time)."""
    MPI = mpi_module()
    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval())
    split = comm.Get_attr(_KEYVAL[0])
    if split is None:
        split = NodeSplit(comm)
        comm.Set_attr(_KEYVAL[0], split)
    return split


def hierarchical(comm, x, ex=None, divide_by=None):
    """Sum (then divide by ``divide_by``) the flat array ``x`` over ``comm`` in place, by node."""
    MPI = mpi_module()
    split = node_split(comm)
    ready(x)
    if split.node.Get_size() > 1:
        leader = split.leaders is not None
        split.node.Reduce(MPI.IN_PLACE if leader else x, x if leader else None, MPI.SUM, root=0)
    if split.leaders is not None:
        if split.leaders.Get_size() > 1:
            ring(split.leaders, x, Exchange(split.leaders, x, split.scratch), divide_by)
        else:
            divide_in_place(x, divide_by)
    if split.node.Get_size() > 1:
        split.node.Bcast(x, root=0)
