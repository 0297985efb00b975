"""Allreduce lab: time every algorithm at this world size and plot it against the cost model.

    mpiexec -n 4 python examples/06_allreduce_lab.py allreduce.png [--sizes 1K,16K,256K,4M,64M]

(``mpiexec -n 2 ... --sizes 1K,64K``: a quick run of a few seconds.)

Points are measured times (median of the slowest rank), lines the alpha-beta-
gamma predictions of ``minidl.perf.allreduce_cost`` with the parameters fitted on
this machine. Things to look for: the butterfly wins for small messages
(fewest latency terms), ring and Rabenseifner for large ones (each rank moves
only 2(P-1)/P of the data), and the tree costs about twice the butterfly.
"""

import argparse

import numpy as np

import minidl.dist as dist
from minidl.cli import bench_allreduce as bench
from minidl.perf import allreduce_cost


def plot(path, results, size, params, algorithms):
    """Measured points and model lines, log-log, one colour per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = np.array(sorted(results))
    fine = np.geomspace(sizes[0], sizes[-1], 200)
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, colour in zip(algorithms, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        measured = [results[n][name] * 1e3 for n in sizes]
        ax.plot(sizes, measured, "o", color=colour, label=f"{name} (measured)")
        if name in allreduce_cost.MODELLED_ALGORITHMS:
            model = [allreduce_cost.predict(name, n, size, params) * 1e3 for n in fine]
            ax.plot(fine, model, "-", color=colour, alpha=0.7, label=f"{name} (model)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("allreduce time (ms)")
    ax.set_title(f"allreduce on {size} ranks\n{bench.describe_params(params)}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("png", help="where to save the plot")
    parser.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M")
    args = parser.parse_args()

    comm = dist.init()
    algorithms = list(dist.ALLREDUCE_ALGORITHMS)
    sizes = [bench.parse_size(text) for text in args.sizes.split(",")]
    results = bench.sweep(comm, sizes, algorithms)
    if comm.rank == 0:
        params = comm.cost_params()
        print(bench.format_table(results, comm.size, params, algorithms))
        plot(args.png, results, comm.size, params, algorithms)
        print(f"saved {args.png}")


if __name__ == "__main__":
    main()
