"""The per-level cost model: the hierarchical allreduce's time, term by term."""

import pytest

from minidl.perf.allreduce_cost import CostParams, predict
from minidl.perf.level_cost import predict_across_nodes, predict_hierarchical

INTRA = CostParams(alpha=2e-6, beta=1e-10, gamma=3e-11)  # shared memory: ~80 Gbit/s
INTER = CostParams(alpha=50e-6, beta=8e-9, gamma=3e-11)  # a 1 Gbit/s link


@pytest.mark.parametrize("nodes, ranks_per_node", [(2, 4), (4, 2), (3, 3), (4, 1)])
def test_hierarchical_time_is_reduce_plus_leaders_ring_plus_broadcast(nodes, ranks_per_node):
    m = 16e6
    rounds = {1: 0, 2: 1, 3: 2, 4: 2}[ranks_per_node]  # binomial rounds: ceil(log2 q)
    reduce = rounds * (INTRA.alpha + m * INTRA.beta + m * INTRA.gamma)
    broadcast = rounds * (INTRA.alpha + m * INTRA.beta)
    n = nodes  # the leaders' ring: 2 (N-1) messages of m/N, (N-1) m/N added
    ring = 2 * (n - 1) * (INTER.alpha + m / n * INTER.beta) + (n - 1) * m / n * INTER.gamma
    expected = reduce + ring + broadcast
    levels = {"intra": INTRA, "inter": INTER}
    got = predict_across_nodes("hierarchical", m, nodes, ranks_per_node, levels)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == predict_hierarchical(m, nodes, ranks_per_node, INTRA, INTER)


def test_flat_algorithms_across_nodes_pay_the_network_at_every_step():
    levels = {"intra": INTRA, "inter": INTER}
    for algorithm in ("ring", "butterfly", "tree", "rabenseifner"):
        got = predict_across_nodes(algorithm, 1e6, 2, 4, levels)
        assert got == predict(algorithm, 1e6, 8, INTER)
    # each of the flat ring's 2 (P-1) steps waits for a network message of m/P; the leaders'
    # ring takes 2 (N-1) steps of m/N: fewer latencies, 2 (N-1)/N m instead of 2 (P-1)/P m
    for m in (1e3, 1e6, 64e6):
        flat = predict_across_nodes("ring", m, 4, 4, levels)
        assert predict_across_nodes("hierarchical", m, 4, 4, levels) < flat
