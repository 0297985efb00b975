"""``mpiexec -n N minidl bench allreduce``: every allreduce algorithm, measured vs the cost model.

Per message size and algorithm: the median over repetitions of the slowest rank's time
(after a barrier), beside ``allreduce_cost.predict``'s with alpha, beta, gamma fitted here.
"""

import re

import numpy as np

from minidl.dist import collectives
from minidl.perf.allreduce_cost import MODELLED_ALGORITHMS, choose, predict, time_allreduce

DEFAULT_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M,256M"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    """``"256K"`` -> 262144 bytes (K, M, G are powers of 1024; a trailing B is allowed)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)i?B?\s*", text, re.I)
    if not match:
        raise ValueError(f"size {text!r}: write a byte count like 4096, 64K, 16M or 1G")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_size(nbytes):
    """262144 -> ``"256 KiB"``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def auto_repeats(predicted_seconds, budget=0.05, low=5, high=100):
    """Repetitions that fit ``budget`` seconds; same on every rank (the prediction is)."""
    return int(np.clip(budget / max(predicted_seconds, 1e-9), low, high))


def sweep(comm, sizes, algorithms, dtype="float32", repeats=None):
    """Median seconds ``{nbytes: {algorithm: t}}``; collective (rank order of calls is fixed).
    ``repeats=None`` picks them from the model so small sizes get more."""
    params = comm.cost_params()
    itemsize = np.dtype(dtype).itemsize
    results = {}
    for nbytes in sizes:
        array = np.zeros(nbytes // itemsize, dtype=dtype)
        slowest = max(predict(n, array.nbytes, comm.size, params) for n in MODELLED_ALGORITHMS)
        count = repeats or auto_repeats(slowest)
        times = {name: time_allreduce(comm, array, name, count) for name in algorithms}
        results[nbytes] = {name: float(np.median(t)) for name, t in times.items()}
    return results


def describe_params(params):
    """One line with the fitted alpha, beta, gamma and the bandwidths they imply."""
    alpha, beta, gamma = params

    def rate(seconds_per_byte):
        return f"{1e-9 / seconds_per_byte:.1f} GB/s" if seconds_per_byte > 0 else "-"

    return (
        f"alpha = {alpha * 1e6:.2f} us, beta = {beta * 1e9:.4f} ns/B ({rate(beta)}), "
        f"gamma = {gamma * 1e9:.4f} ns/B ({rate(gamma)})"
    )


def format_table(results, size, params, algorithms):
    """The sweep as text: measured and modelled ms per algorithm, the fastest, the model's pick."""
    modelled = [name for name in algorithms if name in MODELLED_ALGORITHMS]
    names = "".join(f"{name:>22s}" for name in algorithms)
    lines = [f"size       {names}   fastest       model picks"]
    lines.append("           " + "".join(f"{'measured (model) ms':>22s}" for _ in algorithms))
    for nbytes, times in results.items():
        cells = ""
        for name in algorithms:
            ms = predict(name, nbytes, size, params) * 1e3 if name in modelled else None
            model = "(-)" if ms is None else f"({ms:.3f})"
            cells += f"{times[name] * 1e3:>12.3f} {model:>9s}"  # 22 wide, as the header
        fastest = min(times, key=times.get)
        pick = choose(nbytes, size, params, modelled) if modelled else "-"
        lines.append(f"{format_size(nbytes):<11s}{cells}   {fastest:<13s} {pick}")
    return "\n".join(lines)


def add_allreduce_arguments(parser):
    add = parser.add_argument
    sizes = f"comma-separated message sizes in bytes (default {DEFAULT_SIZES})"
    add("--sizes", default=DEFAULT_SIZES, help=sizes)
    every = ",".join(collectives.ALLREDUCE_ALGORITHMS)
    add("--algorithms", default=every, help="comma-separated algorithms (default: all)")
    add("--dtype", default="float32", choices=("float32", "float64"))
    add("--repeats", type=int, help="repetitions per point (default: from the model, 5 to 100)")


def run_allreduce(args):
    from minidl.dist import init

    comm = init()
    names = args.algorithms.split(",")
    algorithms = [collectives.check_algorithm(n.strip(), allow_auto=False) for n in names]
    sizes = [parse_size(text) for text in args.sizes.split(",")]
    params = comm.cost_params()
    results = sweep(comm, sizes, algorithms, args.dtype, args.repeats)
    if comm.rank == 0:
        print(
            f"allreduce on {comm.size} ranks, {args.dtype}: median over repetitions of the "
            "slowest rank's time, after a barrier"
        )
        print("fitted cost model: " + describe_params(params))
        print(format_table(results, comm.size, params, algorithms))
    return 0
