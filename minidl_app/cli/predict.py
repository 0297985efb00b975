"""``minidl predict``: time per iteration, speedup and efficiency of data-parallel training."""

import argparse
import math

from minidl.backend import limit_threads
from minidl.perf.compute_model import RooflineCompute, measure_compute
from minidl.perf.grid_predict import format_grids, rank_grids
from minidl.perf.level_cost import LEVEL_ALGORITHMS, load_levels, predict_levels
from minidl.perf.machine import machine_named
from minidl.perf.model_costs import count_model
from minidl.perf.network import NETWORKS, SCHEMES, Network
from minidl.perf.predict import explain, format_prediction, predict_scaling
from minidl.perf.summary import human_bytes
from minidl.perf.zoo import build_named

from . import add_model_arguments, positive_int


def parse_nodes(text):
    """'1,2,8' -> [1, 2, 8] (an argparse type: bad input is a usage error)."""
    try:
        nodes = sorted({int(part) for part in text.split(",")})
    except ValueError:
        nodes = []
    if not nodes or nodes[0] < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give positive integers separated by commas, e.g. 1,2,4,8"
        )
    return nodes


def describe_link(network):
    """A network's bandwidth and latency as the reports print them: "56 GB/s, 0.7 us"."""
    return f"{network.bandwidth / 1e9:g} GB/s, {network.latency_s * 1e6:g} us"


def gradient_bytes(model, compression):
    """Bytes of one gradient exchange: every parameter, over the compression ratio."""
    return model.num_parameters() * next(model.parameters()).dtype.itemsize / compression


def default_nodes(global_batch):
    """Powers of two up to 2B: one beyond n = B shows that limit."""
    return [2**k for k in range(int(math.log2(global_batch)) + 2)]


def add_predict_arguments(p):
    add_model_arguments(p)
    add = p.add_argument
    add("--batch", type=positive_int, default=256, help="global batch B")
    add(
        "--nodes",
        type=parse_nodes,
        help=("node counts, e.g. 1,2,4,8 (default powers of 2 up to 2B)"),
    )
    add("--scheme", default="tree", choices=SCHEMES)
    add("--network", default="fdr-infiniband", choices=list(NETWORKS))
    add("--latency-us", type=float, help="overrides the network's latency")
    add(
        "--bandwidth-gbs",
        type=float,
        help=("overrides the network's bandwidth (GB/s; 'inf' for free communication)"),
    )
    add("--compression", type=float, default=1.0, help="gradient compression ratio r")
    add("--serial-fraction", type=float, default=0.0, help="non-scaling fraction s")
    add(
        "--overlap",
        type=float,
        default=0.0,
        help=("fraction of the communication that may hide behind the backward pass"),
    )
    add(
        "--compute",
        default="measure",
        choices=("measure", "roofline"),
        help=("measure per-layer times here at each local batch, or a roofline model"),
    )
    add("--machine", default="here", help="roofline device: here, k80, haswell-2x12")
    add(
        "--time-per-iteration",
        type=float,
        metavar="SECONDS",
        help=("calibrate the roofline so one node takes this long at the global batch"),
    )
    add(
        "--max-measured-batch",
        type=positive_int,
        default=64,
        help=("measure local batches up to this size, extrapolate beyond"),
    )
    add("--steps", type=positive_int, default=3, help=("profiled steps per measured batch size"))
    add(
        "--grids",
        type=positive_int,
        metavar="RANKS",
        help=(
            "rank the dp x tp grids of this many ranks (layers placed by the tensor-parallel "
            "rule) instead of scaling data parallelism"
        ),
    )
    add(
        "--ppn",
        type=positive_int,
        metavar="K",
        help=(
            "ranks per node: predict each allreduce algorithm's time (hierarchical included) "
            "on --nodes nodes of this many ranks, with --network between nodes and --intra-"
            "network inside one"
        ),
    )
    add(
        "--levels",
        metavar="FILE",
        help=(
            "the links measured by fit_levels (a JSON file of save_levels) instead of "
            "--network and --intra-network; implies --ppn 1 unless given"
        ),
    )
    add(
        "--scaling",
        action="store_true",
        help=(
            "with --ppn or --levels: also the data-parallel scaling table (n = nodes x ranks "
            "per node), each n with the fastest allreduce of the per-level model"
        ),
    )
    add(
        "--intra-network",
        default="shared-memory",
        choices=list(NETWORKS),
        help=("the link between two ranks of one node (with --ppn)"),
    )
    add("--intra-latency-us", type=float, help="overrides the intra-node latency")
    add("--intra-bandwidth-gbs", type=float, help="overrides the intra-node bandwidth (GB/s)")


def network_from_args(args, prefix=""):
    """The ``--network`` (``prefix="intra_"``: ``--intra-network``) with its overrides."""
    base = NETWORKS[getattr(args, prefix + "network")]
    latency_us, gbs = getattr(args, prefix + "latency_us"), getattr(args, prefix + "bandwidth_gbs")
    latency = base.latency_s if latency_us is None else latency_us * 1e-6
    bandwidth = base.bandwidth if gbs is None else gbs * 1e9
    return Network(latency, bandwidth, base.reduce_s_per_byte)


def levels_from_args(args):
    """({"intra", "inter"}: CostParams, a phrase saying where they come from)."""
    if args.levels:
        try:
            return load_levels(args.levels), f"links fitted in {args.levels}"
        except OSError as e:
            raise SystemExit(
                f"minidl predict: cannot read --levels {args.levels} ({e.strerror}); write one "
                "with benchmarks/bench_cluster_allreduce.py --save-levels FILE, or give the "
                "links with --network and --intra-network"
            ) from None
        except ValueError as e:
            raise SystemExit(f"minidl predict: {e}") from None
    intra, inter = network_from_args(args, "intra_"), network_from_args(args)
    text = f"between nodes {describe_link(inter)}; inside a node {describe_link(intra)}"
    return {"intra": intra.cost_params(), "inter": inter.cost_params()}, text


def format_levels(rows, ranks_per_node):
    """One row per node count: ranks, each algorithm's milliseconds, the fastest."""
    head = ("nodes", "ranks") + LEVEL_ALGORITHMS + ("fastest",)
    table = [
        (str(n), str(n * ranks_per_node))
        + tuple(f"{1e3 * times[a]:.3f}" for a in LEVEL_ALGORITHMS)
        + (min(LEVEL_ALGORITHMS, key=times.get) if n * ranks_per_node > 1 else "-",)
        for n, times in rows
    ]
    widths = [max(len(r[i]) for r in table + [head]) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(head), "-" * len(fmt(head))] + [fmt(r) for r in table])


def run_level_prediction(args, model, shape):
    """``--ppn``/``--levels``: each allreduce algorithm's time (ms) per node count."""
    levels, source = levels_from_args(args)
    ppn = args.ppn or 1
    nbytes = gradient_bytes(model, args.compression)
    nodes = args.nodes or [1, 2, 4, 8]
    print(
        f"{args.model}: one allreduce of {human_bytes(nbytes)} (compression "
        f"{args.compression:g}) on N nodes x {ppn} ranks, ms; {source}"
    )
    rows = predict_levels(nbytes, nodes, ppn, levels)
    print(format_levels(rows, ppn))
    if args.scaling:
        print_level_scaling(args, model, shape, nbytes, rows, ppn)
    return 0


def print_level_scaling(args, model, shape, nbytes, rows, ppn):
    """``--scaling``: the scaling table over n = nodes x ``ppn`` ranks, each n's gradient
    exchange the fastest algorithm of ``rows`` (``predict_levels``)."""
    fastest = {n * ppn: min(times.values()) for n, times in rows}
    ranks = sorted(fastest)
    compute, source = compute_from_args(args, model, shape, ranks)
    options = dict(serial_fraction=args.serial_fraction, overlap=args.overlap, comm=fastest.get)
    points = predict_scaling(compute, args.batch, ranks, nbytes, None, **options)
    print(
        f"\n{args.model}, B={args.batch} on n = nodes x {ppn} ranks, each n with its fastest "
        f"allreduce above; compute: {source}"
    )
    print(format_prediction(points))
    print(
        "- on the emulated cluster this model predicted about half the measured time of a "
        "bandwidth-bound allreduce (benchmarks/RESULTS.md): read the speedups as upper bounds"
    )


def compute_from_args(args, model, shape, nodes):
    """The compute model the flags ask for, and a line saying what it is."""
    seconds = args.time_per_iteration
    if args.compute == "roofline" or seconds is not None:
        machine = machine_named(args.machine)
        roof = RooflineCompute(count_model(model, shape, 1), machine)
        if seconds is not None:
            text = f"roofline shape of {machine.name}, scaled to {seconds} s at B={args.batch}"
            return roof.calibrated(args.batch, seconds), text
        rates = f"{machine.peak_flops / 1e9:.0f} GFLOP/s, {machine.bandwidth / 1e9:.0f} GB/s"
        return roof, f"roofline on {machine.name} ({rates})"
    local = sorted({math.ceil(args.batch / n) for n in nodes if n <= args.batch})
    measured = [b for b in local if b <= args.max_measured_batch] or local[:1]
    if len(measured) < len(local) and len(measured) == 1:
        measured.append(max(1, measured[0] // 2))
    text = f"measured here at b = {', '.join(map(str, sorted(set(measured))))}"
    return measure_compute(model, shape, measured, steps=args.steps), text


def run_predict(args):
    threads = limit_threads(args.threads)  # noqa: F841  (kept alive while measuring)
    model, shape = build_named(args.model, args.input)
    if args.grids:
        return run_grid_ranking(args, model, shape)
    if args.ppn or args.levels:
        return run_level_prediction(args, model, shape)
    nodes = args.nodes or default_nodes(args.batch)
    compute, source = compute_from_args(args, model, shape, nodes)
    nbytes = gradient_bytes(model, args.compression)
    network = network_from_args(args)
    points = predict_scaling(
        compute, args.batch, nodes, nbytes, network, args.scheme, args.serial_fraction, args.overlap
    )
    print(
        f"{args.model}, B={args.batch}, {args.scheme} over {describe_link(network)}; gradients "
        f"{human_bytes(nbytes)} (compression {args.compression:g}); compute: {source}"
    )
    print(format_prediction(points))
    for line in explain(points, compute, args.batch, nbytes, args.scheme, args.serial_fraction):
        print("- " + line)
    return 0


def run_grid_ranking(args, model, shape):
    """``--grids N``: every dp x tp grid of N ranks, fastest predicted step first."""
    from minidl.dist.tensor import plan
    from minidl.dist.tensor.placement import split_widths

    dps = [args.grids // t for t in range(1, args.grids + 1) if args.grids % t == 0]
    compute, source = compute_from_args(args, model, shape, dps)
    network = network_from_args(args)
    words = plan(model)
    narrowest = min((w for w, _, _ in split_widths(model, words)), default=args.grids)
    points = rank_grids(
        model, shape, words, narrowest, args.grids, args.batch, compute, network, args.scheme
    )
    print(
        f"{args.model}, B={args.batch} on {args.grids} ranks, {args.scheme} over "
        f"{describe_link(network)}; compute: {source}"
    )
    print(format_grids(points))
    return 0
