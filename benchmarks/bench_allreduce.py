"""AlexNet-sized allreduce: every algorithm vs the MPI library's own, and vs the ping-pong bound.

    mpiexec -n 2 python benchmarks/bench_allreduce.py [--elements 61100840] [--runs 7]
            [--segments 256K,512K,1M]

Every algorithm reduces the same float32 array (AlexNet's 61,100,840
gradients, 244 MB). Runs are interleaved (run 1 of everything, then run 2,
...) so that load from other processes hits all of them alike; each time is
the slowest rank's, after a barrier; the table shows medians (and minima).

The bound: a bandwidth-optimal allreduce moves 2(P-1)/P of the bytes through
each rank's link and adds (P-1)/P of them, so with the ping-pong bandwidth
B_link (one-way, best of 16 and 64 MiB messages) and the segment-wise add
rate B_add (on one block of n/P elements), both measured in every run::

    T_bound = 2 (P-1)/P * bytes / B_link + (P-1)/P * bytes / B_add

On shared memory both directions of an exchange share one memory system,
which a ping-pong (one direction at a time) does not see, so the bound is
optimistic there.
"""

import argparse

import numpy as np

import minidl.dist as dist
from minidl.backend import tune_malloc
from minidl.dist import collectives
from minidl.perf import allreduce_cost as cost
from minidl_app.cli import bench_allreduce as bench

tune_malloc()  # as the minidl command does: step temporaries stay in the process

PINGPONG_SIZES = (1 << 24, 1 << 26)


def bound_terms(comm, nbytes):
    """(link seconds, add seconds) of the bound, from one ping-pong and one add measurement."""
    share = (comm.size - 1) / comm.size
    one_way = cost.pingpong(comm, PINGPONG_SIZES, batches=1)
    add_seconds_per_byte = cost.measure_gamma(
        collectives.SEGMENT_BYTES, nbytes // comm.size, repeats=1
    )
    if comm.rank != 0:
        return None
    link = max(m / t for m, t in zip(PINGPONG_SIZES, one_way))
    return 2 * share * nbytes / link, share * nbytes * add_seconds_per_byte


def measure(comm, array, names, runs):
    """Per-run seconds of every name (an algorithm, or ``ring@<segment>``) and of the
    bound terms."""
    times = {name: [] for name in names}
    bounds = []
    default_segment = collectives.SEGMENT_BYTES
    for run in range(runs + 1):  # run 0 warms up (scratch buffers, page faults)
        terms = bound_terms(comm, array.nbytes)
        for name in names:
            algorithm, _, segment = name.partition("@")
            collectives.SEGMENT_BYTES = bench.parse_size(segment) if segment else default_segment
            seconds = cost.time_allreduce(comm, array, algorithm, 1, warmup=False)[0]
            if run:
                times[name].append(seconds)
        if run and terms:
            bounds.append(terms)
    collectives.SEGMENT_BYTES = default_segment
    return times, bounds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=61_100_840)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--segments",
        default="",
        help="also time the ring with these pipeline segment sizes, e.g. 256K,1M",
    )
    args = parser.parse_args()

    comm = dist.init()
    size = comm.size
    array = np.zeros(args.elements, dtype=np.float32)
    nbytes = array.nbytes
    params = comm.cost_params()
    names = list(dist.ALLREDUCE_ALGORITHMS)
    names += [f"ring@{s.strip()}" for s in args.segments.split(",") if s.strip()]
    times, bounds = measure(comm, array, names, args.runs)
    if comm.rank != 0:
        return

    link_s, add_s = (float(np.median(column)) for column in zip(*bounds))
    bound = link_s + add_s
    native = float(np.median(times["mpi"]))
    print(
        f"allreduce of {args.elements:,} float32 ({nbytes / 1e6:.1f} MB) on {size} ranks; "
        f"median (min) of {args.runs} interleaved runs, slowest rank, after a barrier; "
        f"segment {bench.format_size(collectives.SEGMENT_BYTES)}"
    )
    share = (size - 1) / size
    print(
        f"ping-pong bandwidth {2 * share * nbytes / link_s / 1e9:.2f} GB/s, "
        f"segment-wise add {share * nbytes / add_s / 1e9:.2f} GB/s (medians over the runs)"
    )
    print(
        f"bound = 2(P-1)/P * bytes / B_link + (P-1)/P * bytes / B_add = "
        f"{link_s * 1e3:.1f} + {add_s * 1e3:.1f} = {bound * 1e3:.1f} ms"
    )
    print("fitted cost model: " + bench.describe_params(params))
    print(
        f"{'algorithm':<16s}{'median ms':>10s}{'min ms':>9s}{'model ms':>10s}"
        f"{'/ native':>10s}{'/ bound':>9s}"
    )
    medians = {name: float(np.median(t)) for name, t in times.items()}
    for name, median in medians.items():
        algorithm = name.partition("@")[0]
        model = (
            f"{cost.predict(algorithm, nbytes, size, params) * 1e3:.1f}"
            if algorithm in cost.MODELLED_ALGORITHMS
            else "-"
        )
        print(
            f"{name:<16s}{median * 1e3:>10.1f}{min(times[name]) * 1e3:>9.1f}{model:>10s}"
            f"{median / native:>10.2f}{median / bound:>9.2f}"
        )
    best = min(dist.ALLREDUCE_ALGORITHMS[1:], key=medians.get)
    print(
        f"best hand-written: {best}, {medians[best] / native:.2f}x MPI's Allreduce, "
        f"{medians[best] / bound:.2f}x the bound"
    )


if __name__ == "__main__":
    main()
