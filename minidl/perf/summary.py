"""``minidl summary``: per-layer shapes, parameters, MACs, FLOPs, memory, work and depth.

Conventions (see ``costs`` and ``counters``): a multiply-add is 2 FLOPs and
1 MAC; work W and depth D are Ben-Nun & Hoefler's (Ben-Nun & Hoefler 2019, Tables
4 and 6), with its errata corrected unless ``--convention paper`` asks for
the numbers of its LeNet example.
"""

from .model_costs import count_model
from .zoo import build_named

COLUMNS = (
    "layer",
    "type",
    "output",
    "params",
    "MACs",
    "fwd FLOPs",
    "bwd FLOPs",
    "activations",
    "W",
    "D",
    "bwd W",
    "bwd D",
)


def human_bytes(n):
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def aligned(rows, left):
    """The formatter of a text table's rows (tuples of strings): columns as wide as their widest
    cell in ``rows``, two spaces apart, the first ``left`` left-aligned, the others right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return lambda row: "  ".join(
        c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
    )


def _row(layer):
    return (
        layer.name,
        layer.kind,
        "x".join(map(str, layer.output_shape[1:])),
        f"{layer.params:,}",
        f"{layer.macs:,}",
        f"{layer.forward_flops:,}",
        f"{layer.backward_flops:,}",
        human_bytes(layer.activation_bytes),
        f"{layer.work:,}",
        str(layer.depth),
        f"{layer.backward_work:,}",
        str(layer.backward_depth),
    )


def format_summary(costs, title=""):
    """The per-layer table with a totals line and the conventions it uses."""
    t = costs.totals()
    rows = [_row(layer) for layer in costs.layers]
    total = (
        "total",
        "",
        "",
        f"{costs.num_parameters:,}",
        f"{t['macs']:,}",
        f"{t['forward_flops']:,}",
        f"{t['backward_flops']:,}",
        human_bytes(t["activation_bytes"]),
        f"{t['work']:,}",
        str(t["depth"]),
        f"{t['backward_work']:,}",
        str(t["backward_depth"]),
    )
    fmt = aligned(rows + [COLUMNS, total], 3)
    rule = "-" * len(fmt(COLUMNS))
    shape = "x".join(map(str, costs.input_shape))
    lines = (
        [
            f"{title} input {shape}, batch {costs.batch}, convention {costs.convention!r}".strip(),
            fmt(COLUMNS),
            rule,
        ]
        + [fmt(r) for r in rows]
        + [rule, fmt(total)]
    )
    depth = max(t["depth"], 1)
    lines += [
        f"parameters {costs.num_parameters:,} ({human_bytes(t['param_bytes'])}); "
        f"forward {t['macs'] / costs.batch:,.0f} MACs per sample",
        f"average parallelism W/D = {t['work']:,} / {t['depth']} = {t['work'] / depth:,.0f} "
        f"(forward; Ben-Nun & Hoefler 2019, §2.5)",
        "MACs: multiply-accumulates of convolutions and matrix products; FLOPs = 2 per MAC "
        "+ 1 per other operation; W, D: Ben-Nun & Hoefler 2019, Tables 4 and 6 "
        + (
            "as printed (LeNet example of §3.3.1)"
            if costs.convention == "paper"
            else "with the errata corrected"
        ),
    ]
    for layer in costs.uncounted:
        lines.append(f"note: {layer.name} ({layer.kind}): {layer.notes[0]}")
    return "\n".join(lines)


def summarize(name, input_shape=None, batch=1, convention="corrected"):
    """``ModelCosts`` of a model named in ``MODEL_NAMES``."""
    model, shape = build_named(name, input_shape)
    return count_model(model, shape, batch, convention)
