"""AlexNet-sized allreduce: every algorithm vs the MPI library's own, and vs the ping-pong bound.

    mpiexec -n 2 python benchmarks/bench_allreduce.py [--elements 61100840] [--runs 7]
            [--segments 256K,1M,4M]

Every algorithm reduces the same float32 array (AlexNet's 61,100,840
gradients, 244 MB). Runs are interleaved (run 1 of every algorithm, then run
2, ...) so that load from other processes hits all of them alike; each run
is the slowest rank's time after a barrier; the table shows the median.

The bound: a bandwidth-optimal allreduce moves 2(P-1)/P of the bytes through
each rank's link and adds (P-1)/P of them, so with the ping-pong bandwidth
B_link and the segment-wise add rate B_add::

    T_bound = 2 (P-1)/P * bytes / B_link + (P-1)/P * bytes / B_add
"""
import argparse

import numpy as np

import minidl.dist as dist
from minidl.dist import bench, collectives, costmodel

PINGPONG_SIZES = (1 << 20, 1 << 22, 1 << 24, 1 << 26)


def measure(comm, array, names, runs):
    """Median and min seconds per name; a name is an algorithm, optionally ``ring@<segment>``."""
    times = {name: [] for name in names}
    default_segment = collectives.SEGMENT_BYTES
    for run in range(runs + 1):  # run 0 warms up (scratch buffers, page faults)
        for name in names:
            algorithm, _, segment = name.partition("@")
            collectives.SEGMENT_BYTES = bench.parse_size(segment) if segment else default_segment
            seconds = costmodel.time_allreduce(comm, array, algorithm, 1, warmup=False)[0]
            if run:
                times[name].append(seconds)
    collectives.SEGMENT_BYTES = default_segment
    return {name: (float(np.median(t)), float(np.min(t))) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=61_100_840)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--segments", default="",
                        help="also time the ring with these pipeline segment sizes, e.g. 256K,1M,4M")
    args = parser.parse_args()

    comm = dist.init()
    size = comm.size
    array = np.zeros(args.elements, dtype=np.float32)
    nbytes = array.nbytes
    one_way = costmodel.pingpong(comm.mpi, PINGPONG_SIZES)
    params = comm.cost_params()
    add_seconds_per_byte = costmodel.measure_gamma()
    names = list(dist.ALLREDUCE_ALGORITHMS)
    names += [f"ring@{s.strip()}" for s in args.segments.split(",") if s.strip()]
    results = measure(comm, array, names, args.runs)
    if comm.rank != 0:
        return

    link = max(m / t for m, t in zip(PINGPONG_SIZES, one_way))
    share = (size - 1) / size
    t_link = 2 * share * nbytes / link
    t_add = share * nbytes * add_seconds_per_byte
    bound = t_link + t_add
    native = results["mpi"][0]
    print(f"allreduce of {args.elements:,} float32 ({nbytes / 1e6:.1f} MB) on {size} ranks; "
          f"median (min) of {args.runs} interleaved runs, slowest rank, after a barrier")
    print(f"ping-pong bandwidth (best of 1-64 MiB): {link / 1e9:.2f} GB/s; "
          f"segment-wise add: {1e-9 / add_seconds_per_byte:.2f} GB/s")
    print(f"bound = 2(P-1)/P * bytes / B_link + (P-1)/P * bytes / B_add = "
          f"{t_link * 1e3:.1f} + {t_add * 1e3:.1f} = {bound * 1e3:.1f} ms")
    print("fitted cost model: " + bench.describe_params(params))
    print(f"{'algorithm':<16s}{'median ms':>10s}{'min ms':>9s}{'model ms':>10s}"
          f"{'/ native':>10s}{'/ bound':>9s}")
    for name, (median, fastest) in results.items():
        algorithm = name.partition("@")[0]
        model = (f"{costmodel.predict(algorithm, nbytes, size, params) * 1e3:.1f}"
                 if algorithm in costmodel.MODELLED_ALGORITHMS else "-")
        print(f"{name:<16s}{median * 1e3:>10.1f}{fastest * 1e3:>9.1f}{model:>10s}"
              f"{median / native:>10.2f}{median / bound:>9.2f}")
    best = min((n for n in results if n != "mpi" and "@" not in n), key=lambda n: results[n][0])
    print(f"best hand-written: {best}, {results[best][0] / native:.2f}x MPI's Allreduce, "
          f"{results[best][0] / bound:.2f}x the bound")


if __name__ == "__main__":
    main()
