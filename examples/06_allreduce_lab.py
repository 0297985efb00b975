"""Allreduce lab: time every algorithm at this world size and plot it against the cost model.

    mpiexec -n 4 python examples/06_allreduce_lab.py allreduce.png [--sizes 1K,16K,256K,4M,64M]

(``mpiexec -n 2 ... --sizes 1K,64K``: a quick run of a few seconds.)

Points are measured times (median of the slowest rank), lines the alpha-beta-
gamma predictions of ``minidl.perf.allreduce_cost`` with the parameters fitted on
this machine. Things to look for: the butterfly wins for small messages
(fewest latency terms), ring and Rabenseifner for large ones (each rank moves
only 2(P-1)/P of the data), and the tree costs about twice the butterfly.
At 2 ranks ring and Rabenseifner are the same exchange, so their model
lines coincide (the second is dashed). The model prices messages and bytes
only; small messages are dominated by per-call costs (Python, mpi4py, ranks
waiting for a core when there are more ranks than cores) that one fitted
alpha matches only roughly, so they may sit several-fold above or below
their lines (the figure prints the ratio).
"""

import argparse

import numpy as np

import minidl.dist as dist
from minidl.perf import allreduce_cost
from minidl_app.cli import bench_allreduce as bench

MODEL_NOTE = (
    "lines: alpha-beta-gamma model (alpha per message step, beta and gamma per byte), fitted "
    "here.\nSmall messages are dominated by per-call costs (Python, mpi4py, a rank waiting "
    "for a core when\nthere are more ranks than cores) that one alpha fits only roughly: "
    "measured / model at {small}: {low:.1f}x to {high:.1f}x."
)


def plot(path, results, size, params, algorithms):
    """Measured points and model lines, log-log, one colour per algorithm; a model line that
    coincides with an earlier one (ring and Rabenseifner at 2 ranks) is dashed and says so.
    Returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = np.array(sorted(results))
    fine = np.geomspace(sizes[0], sizes[-1], 200)
    fig, ax = plt.subplots(figsize=(7, 5.5))
    drawn, ratios = {}, []
    for name, colour in zip(algorithms, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        measured = [results[n][name] * 1e3 for n in sizes]
        ax.plot(sizes, measured, "o", color=colour, label=f"{name} (measured)")
        if name not in allreduce_cost.MODELLED_ALGORITHMS:
            continue
        model = np.array([allreduce_cost.predict(name, n, size, params) * 1e3 for n in fine])
        same = next((other for other, line in drawn.items() if np.allclose(line, model)), None)
        label = f"{name} (model)" if same is None else f"{name} (model = {same}'s at P={size})"
        ax.plot(fine, model, "--" if same else "-", color=colour, alpha=0.7, label=label)
        drawn[name] = model
        small = allreduce_cost.predict(name, sizes[0], size, params) * 1e3
        if small > 0:
            ratios.append(measured[0] / small)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("allreduce time (ms)")
    ax.set_title(f"allreduce on {size} ranks\n{bench.describe_params(params)}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    if ratios:
        note = MODEL_NOTE.format(small=f"{sizes[0]:,} B", low=min(ratios), high=max(ratios))
        fig.text(0.01, 0.01, note, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=120)
    return fig


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
