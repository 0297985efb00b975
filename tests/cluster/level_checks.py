"""Run on the emulated cluster by test_level_cost.py: fit alpha and beta per level and print them.

Prints ``LEVELS intra_beta inter_beta inter_alpha`` on rank 0.
"""

import socket

from minidl import dist
from minidl.dist import collectives
from minidl.perf.level_cost import fit_levels

SIZES = (8, 1 << 12, 1 << 16, 1 << 20, 1 << 22)  # beta: the slope from 1 to 4 MiB

comm = dist.init()
hosts = comm.allgather_object(socket.gethostname())
levels = fit_levels(
    comm, [sorted(set(hosts)).index(h) for h in hosts], collectives.SEGMENT_BYTES, SIZES
)
if comm.rank == 0:
    intra, inter = levels["intra"], levels["inter"]
    print(f"LEVELS {intra.beta!r} {inter.beta!r} {inter.alpha!r}", flush=True)
