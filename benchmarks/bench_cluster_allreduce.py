"""Allreduce across emulated nodes whose links are capped: each algorithm against MPI's own
and against the per-level cost model (``minidl/perf/level_cost.py``).

Needs root (``scripts/cluster.py`` builds the nodes). Prints, per link rate and
message size, each algorithm's median time, its ratio to MPI's allreduce and
the model's prediction (and the ratio predicted / measured)::

    sudo .venv/bin/python benchmarks/bench_cluster_allreduce.py --nodes 2 --ppn 2 \\
        --rates 1gbit,10gbit,none --sizes-mb 1,16

``--save-levels FILE`` also writes each rate's fit (``FILE`` with the rate before
its suffix, e.g. ``levels-1gbit.json``) for ``minidl predict --levels FILE``.
"""

import argparse
import importlib.util
import os
import pathlib
import signal
import socket
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
ALGORITHMS = ("mpi", "ring", "butterfly", "tree", "rabenseifner", "hierarchical")
FIT_SIZES = (8, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24)  # beta: 4 to 16 MiB


def job(sizes_mb, repeats, save_levels_to=None):
    """The MPI side: fit the levels, time every algorithm, print one table row per case."""
    from minidl import dist
    from minidl.dist import collectives
    from minidl.perf.allreduce_cost import time_allreduce
    from minidl.perf.level_cost import fit_levels, predict_across_nodes, save_levels

    comm = dist.init()
    hosts = comm.allgather_object(socket.gethostname())
    node_of = [sorted(set(hosts), key=hosts.index).index(h) for h in hosts]
    nodes, ppn = len(set(hosts)), hosts.count(hosts[0])
    levels = fit_levels(comm, node_of, collectives.SEGMENT_BYTES, FIT_SIZES)
    if comm.rank == 0 and save_levels_to:
        save_levels(save_levels_to, levels)
    if comm.rank == 0:
        for level, p in levels.items():
            if p is not None:
                print(
                    f"  {level}: alpha {p.alpha * 1e6:.1f} us, {8 / p.beta / 1e9:.2f} Gbit/s",
                    flush=True,
                )
    for mb in sizes_mb:
        x = np.ones(int(mb * (1 << 20)) // 4, dtype=np.float32)
        measured = {a: float(np.median(time_allreduce(comm, x, a, repeats))) for a in ALGORITHMS}
        if comm.rank == 0:
            for a in ALGORITHMS:
                ratio = measured[a] / measured["mpi"]
                line = f"  {mb:g} MiB {a:>13}: {measured[a] * 1e3:8.1f} ms, x{ratio:.2f} of mpi"
                if a != "mpi":
                    t = predict_across_nodes(a, x.nbytes, nodes, ppn, levels)
                    line += f", model {t * 1e3:7.1f} ms (x{t / measured[a]:.2f})"
                print(line, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ppn", type=int, default=2)
    parser.add_argument("--rates", default="1gbit,10gbit,none")
    parser.add_argument("--sizes-mb", default="1,16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--save-levels", metavar="FILE", help="write each rate's fit here")
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    if args.job:
        return job(sizes, args.repeats, args.save_levels)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still take the nodes down
    spec = importlib.util.spec_from_file_location("cluster", ROOT / "scripts" / "cluster.py")
    cluster = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cluster)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpi = cluster.mpi_flavor(mpiexec)
    print(f"{args.nodes} nodes x {args.ppn} ranks, {mpi}, machine: {os.cpu_count()} cores (shared)")
    for rate in args.rates.split(","):
        rate = None if rate == "none" else rate
        with cluster.Cluster(args.nodes, rate=rate, name=f"bench{os.getpid()}") as c:
            print(f"links: {rate or 'unlimited'}", flush=True)
            env = {"PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
            command = [sys.executable, __file__, "--job", "--sizes-mb", args.sizes_mb]
            command += ["--repeats", str(args.repeats)]
            if args.save_levels:
                stem, suffix = os.path.splitext(os.path.abspath(args.save_levels))
                command += ["--save-levels", f"{stem}-{rate or 'unlimited'}{suffix}"]
            code, output, timed_out = c.mpirun(command, args.ppn, mpi, mpiexec, env, timeout=1800)
            print(output, end="")
            if code or timed_out:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
