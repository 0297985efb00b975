"""Run on the emulated cluster by test_hierarchical.py: the hierarchical allreduce by node.

Prints ``CHECK OK rank R nodes N`` when every check passed on this rank.
"""

import socket
import sys

import numpy as np

import minidl.reference  # noqa: F401 (registers "hierarchical_reference")
from minidl import dist
from minidl.exercises.checks.collectives import check_allreduce, digest, on_nodes, rank_input
from minidl.reference.dist import allreduce as reference

comm = dist.init()
expected_nodes = int(sys.argv[1])
# the textbook version against the exact sums and the tuned one, with the same bits everywhere
check_allreduce(comm, on_nodes(reference.nodes_of(comm)), "hierarchical")
nodes, largest = comm.node_layout()
assert nodes == expected_nodes, (nodes, expected_nodes)
hosts = comm.allgather_object(socket.gethostname())
assert len(set(hosts)) == nodes, hosts

# the tuned version: a mean of 2**20 float64 values (8 MiB: 'auto' picks it across nodes)
x = rank_input(comm.rank, 1 << 20, "float64")
exact = np.sum([rank_input(r, 1 << 20, "float64") for r in range(comm.size)], axis=0) / comm.size
assert comm.choose_algorithm(x) == ("hierarchical" if nodes > 1 and largest > 1 else "ring")
comm.allreduce(x, "mean", algorithm="hierarchical")
assert np.allclose(x, exact, rtol=0, atol=1e-13), np.abs(x - exact).max()
assert len(set(comm.allgather_object(digest(x)))) == 1, "ranks hold different bits"
print(f"CHECK OK rank {comm.rank} nodes {nodes}", flush=True)
