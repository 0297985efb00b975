"""The alpha-beta cost model per level: one (alpha, beta) inside a node, one between nodes.

Ranks of one node exchange messages through shared memory; ranks of two
nodes through the network, with a larger latency alpha and inverse bandwidth
beta. ``fit_levels`` fits both by ping-pong (``allreduce_cost.pingpong``
between two ranks of one node, then between the first ranks of two nodes),
each as Hockney (1994) characterises a link (``fit_link``): alpha the time
of the smallest message, beta the slope between the two largest,

    alpha = t(m_min),    beta = (t(m_max) - t(m_next)) / (m_max - m_next),

so that what a link lets through at once (a switch's buffer, a rate limiter's
token bucket) cancels out of beta: a least-squares fit over every size
(``allreduce_cost.fit_alpha_beta``) counts those fast short messages as bandwidth,
and found a 1 Gbit/s emulated link 1.5-2x faster than it is.

A flat algorithm whose ranks are numbered node by node crosses the network
at every step of its critical path (the ring's steps run concurrently, one
message per link), so its time is predicted with the inter-node parameters.
The hierarchical allreduce (``minidl/dist/collectives.py``) on N nodes of
q ranks costs, with L = ceil(log2 q) and binomial reduce and broadcast
inside the node (Thakur, Rabenseifner & Gropp 2005):

    T_hier = L (a_in + m b_in + m g)          reduce on the node's leader
           + T_ring(N; a_out, b_out, g)       ring among the N leaders
           + L (a_in + m b_in)                broadcast in the node

``save_levels`` writes a fit to a JSON file that ``load_levels`` (and
``minidl predict --levels FILE``) reads back; ``predict_levels`` tabulates
every algorithm's time for several node counts.
"""

import json

from minidl.intmath import ceil_log2

from .allreduce_cost import MODELLED_ALGORITHMS, PINGPONG_SIZES, CostParams, measure_gamma, pingpong
from .allreduce_cost import predict as predict_flat


def fit_link(sizes, times):
    """(alpha, beta) of a link from one-way times at increasing ``sizes`` (module docstring):
    the smallest message's time, and the slope between the two largest sizes."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    if len(order) < 3:
        raise ValueError(f"fit_link: needs 3 sizes or more (a latency and a slope), got {sizes}")
    small, below, top = order[0], order[-2], order[-1]
    beta = (times[top] - times[below]) / (sizes[top] - sizes[below])
    return float(times[small]), float(max(beta, 0.0))


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
        fitted[level] = fit_link(sizes, times) if times else None
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
    if nodes == 1:  # every message stays inside the node
        return predict_flat(algorithm, nbytes, ranks_per_node, levels["intra"])
    return predict_flat(algorithm, nbytes, nodes * ranks_per_node, levels["inter"])


LEVEL_ALGORITHMS = MODELLED_ALGORITHMS + ("hierarchical",)


def predict_levels(nbytes, node_counts, ranks_per_node, levels, algorithms=LEVEL_ALGORITHMS):
    """[(nodes, {algorithm: seconds})] for each count in ``node_counts``
    (``predict_across_nodes`` with ``ranks_per_node`` ranks on each node)."""
    return [
        (n, {a: predict_across_nodes(a, nbytes, n, ranks_per_node, levels) for a in algorithms})
        for n in node_counts
    ]


def save_levels(path, levels):
    """Write ``levels`` (from ``fit_levels``) as JSON: {level: {alpha, beta, gamma} or null}."""
    with open(path, "w") as f:
        json.dump({k: None if p is None else p._asdict() for k, p in levels.items()}, f, indent=1)


def load_levels(path):
    """The levels ``save_levels`` wrote; a clear error when a level is missing or malformed."""
    with open(path) as f:
        raw = json.load(f)
    levels = {}
    for level in ("intra", "inter"):
        entry = raw.get(level) if isinstance(raw, dict) else None
        try:
            levels[level] = CostParams(**{k: float(entry[k]) for k in CostParams._fields})
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{path}: no {level!r} level with alpha, beta and gamma (seconds, s/byte, "
                "s/byte); write the file with save_levels after fit_levels on ranks spanning "
                "at least 2 nodes with 2 ranks on a node (e.g. bench_cluster_allreduce.py "
                "--save-levels FILE --ppn 2), or give the links with --network/--intra-* options"
            ) from None
    return levels
