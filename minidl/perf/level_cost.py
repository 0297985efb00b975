"""The alpha-beta cost model per level: one (alpha, beta) inside a node, one between nodes.

Ranks of one node exchange messages through shared memory; ranks of two
nodes through the network, with a larger latency alpha and inverse bandwidth
beta. ``fit_levels`` fits both by ping-pong (``allreduce_cost.pingpong``
between two ranks of one node, then between the first ranks of two nodes).

A flat algorithm whose ranks are numbered node by node crosses the network
at every step of its critical path (the ring's steps run concurrently, one
message per link), so its time is predicted with the inter-node parameters.
The hierarchical allreduce (``minidl/dist/hierarchical.py``) on N nodes of
q ranks costs, with L = ceil(log2 q) and binomial reduce and broadcast
inside the node (Thakur, Rabenseifner & Gropp 2005):

    T_hier = L (a_in + m b_in + m g)          reduce on the node's leader
           + T_ring(N; a_out, b_out, g)       ring among the N leaders
           + L (a_in + m b_in)                broadcast in the node
"""

from minidl.intmath import ceil_log2

from .allreduce_cost import PINGPONG_SIZES, CostParams, fit_alpha_beta, measure_gamma, pingpong
from .allreduce_cost import predict as predict_flat


def fit_levels(comm, node_of, segment_bytes, sizes=PINGPONG_SIZES):
    """{"intra": CostParams or None, "inter": CostParams or None} fitted on ``comm``.

    ``node_of[r]``: the node index of rank r (every rank passes the same list).
    A level with no pair of ranks (one node; one rank per node) gets None.
    Collective; rank 0 fits gamma and broadcasts, so every rank gets the same.
    """
    first = {}
    for rank, node in enumerate(node_of):
        first.setdefault(node, rank)
    same = next((r for r in range(1, len(node_of)) if node_of[r] == node_of[0]), None)
    other = next((first[n] for n in first if n != node_of[0]), None)
    fitted = {}
    for level, pair in (("intra", (0, same)), ("inter", (0, other))):
        times = pingpong(comm, sizes, pair=pair) if pair[1] is not None else None
        fitted[level] = fit_alpha_beta(sizes, times) if times else None
    gamma = measure_gamma(segment_bytes) if comm.rank == 0 else None
    fitted = comm.bcast_object((fitted, gamma))
    return {
        level: None if ab is None else CostParams(ab[0], ab[1], fitted[1])
        for level, ab in fitted[0].items()
    }


def predict_hierarchical(nbytes, nodes, ranks_per_node, intra, inter):
    """Seconds of one hierarchical allreduce of ``nbytes`` (``T_hier`` above)."""
    rounds = ceil_log2(ranks_per_node)
    inside = 0.0
    if rounds:
        inside = rounds * (2 * intra.alpha + 2 * nbytes * intra.beta + nbytes * intra.gamma)
    return inside + predict_flat("ring", nbytes, nodes, inter)


def predict_across_nodes(algorithm, nbytes, nodes, ranks_per_node, levels):
    """Predicted seconds of ``algorithm`` on ``nodes`` x ``ranks_per_node`` ranks numbered node
    by node, with ``levels`` from ``fit_levels``."""
    if algorithm == "hierarchical":
        return predict_hierarchical(nbytes, nodes, ranks_per_node, levels["intra"], levels["inter"])
    return predict_flat(algorithm, nbytes, nodes * ranks_per_node, levels["inter"])
