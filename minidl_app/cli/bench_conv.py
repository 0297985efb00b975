"""``minidl bench conv``: the convolution algorithms side by side (``minidl_app.conv_bench``)."""

from minidl_app.conv_bench import CANDIDATES, LAYERS, bench_layer, format_rows


def add_conv_arguments(parser):
    add = parser.add_argument
    batch = "batch of the AlexNet and 3x3 layers (LeNet layers use 64)"
    add("--batch-size", type=int, default=16, help=batch)
    layers = f"layer names or prefixes (default: all of {[n for n, *_ in LAYERS]})"
    add("--layers", nargs="*", help=layers)
    algos = f"algorithms to time (default: {' '.join(CANDIDATES)})"
    add("--algos", nargs="*", default=list(CANDIDATES), help=algos)
    add("--repeats", type=int, default=5, help="timed rounds per layer (median)")
    add("--no-torch", action="store_true", help="do not time PyTorch")
    busy = "before each timed run, wait (up to 10 s) until other processes use less than this "
    add("--max-busy", type=float, help=busy + "fraction of the CPUs, e.g. 0.1 on a shared machine")


def selected_layers(patterns):
    names = [n for n, *_ in LAYERS]
    if not patterns:
        return names
    chosen = [n for n in names if any(n == p or n.startswith(p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"bench conv: no layer matches {patterns}; layers are {names}")
    return chosen


def run_conv(args):
    options = dict(use_torch=not args.no_torch, max_busy=args.max_busy)
    for i, name in enumerate(selected_layers(args.layers)):
        rows = bench_layer(name, args.batch_size, tuple(args.algos), args.repeats, **options)
        table = format_rows(rows)
        print(table if i == 0 else table.split("\n", 2)[2], flush=True)  # one header
    return 0
