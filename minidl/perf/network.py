"""Communication time of one gradient exchange per iteration, by scheme.

The allreduce schemes ("ring", "tree", "butterfly", "rabenseifner") use
the alpha-beta-gamma model of ``allreduce_cost.py`` (Ben-Nun &
Hoefler 2019, §2.5); this module only maps a ``Network`` onto its
parameters. The parameter server ("ps") runs on one of the n nodes, which
receives n-1 gradients and sends n-1 models through its one link, adding
each gradient as it arrives: 2(n-1)(alpha + m beta) + (n-1) m gamma, the
2(n-1)M bytes per iteration of Keuper & Pfreundt (2016, §IV-A). (Ben-Nun &
Hoefler's §6.2 equates a parameter server with T_tree, which is what a
sharded or tree-shaped server achieves; use "tree" for that.)
"""

from dataclasses import dataclass

from .allreduce_cost import MODELLED_ALGORITHMS, CostParams, predict

SCHEMES = MODELLED_ALGORITHMS + ("ps",)


@dataclass(frozen=True)
class Network:
    """Point-to-point latency (s), bandwidth (bytes/s), cost of adding received bytes (s/byte)."""

    latency_s: float
    bandwidth: float
    reduce_s_per_byte: float = 0.0

    def cost_params(self):
        beta = 0.0 if self.bandwidth == float("inf") else 1.0 / self.bandwidth
        return CostParams(self.latency_s, beta, self.reduce_s_per_byte)


NETWORKS = {
    # nominal link rates; latencies are typical MPI small-message times
    "fdr-infiniband": Network(1.5e-6, 6.0e9),  # 4x FDR: 54.5 Gb/s of data, as in Keuper & Pfreundt
    "10gbe": Network(10e-6, 1.25e9),
    "1gbe": Network(50e-6, 0.125e9),
    # inside one node: MPI's shared-memory copies (a typical small-message time and copy rate)
    "shared-memory": Network(0.5e-6, 10e9),
}


def comm_time(scheme, nbytes, nodes, network):
    """Seconds to combine ``nbytes`` of gradients over ``nodes`` with ``scheme`` (0: one node)."""
    if scheme not in SCHEMES:
        raise ValueError(
            f"unknown communication scheme {scheme!r}: choose one of {', '.join(SCHEMES)}"
        )
    if nodes <= 1 or nbytes == 0:
        return 0.0
    params = network.cost_params()
    if scheme == "ps":
        return params.seconds(2 * (nodes - 1), 2 * (nodes - 1) * nbytes, (nodes - 1) * nbytes)
    return predict(scheme, nbytes, nodes, params)
