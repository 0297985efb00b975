"""``minidl predict``: how data-parallel SGD scales, and where and why it stalls.

Model (Keuper & Pfreundt 2016, "Distributed training of deep neural
networks: theoretical and practical limits of parallel scalability"): the
global batch B is split over n nodes, b = ceil(B/n) samples each; an
iteration computes on b samples, then combines the gradients::

    T_comp(n) = s T(B) + (1 - s) T(b)           s: non-scaling fraction (Amdahl)
    T_comm(n) = scheme time of M/r bytes         M: gradient bytes, r: compression ratio
    T(n)      = T_comp(n) + T_comm(n) - min(f T_comm(n), (1 - s) T_backward(b))
    speedup S(n) = T(B) / T(n),  efficiency E(n) = S(n) / n

with T(b) from a compute model (measured here per layer, or a roofline
calibrated to a given time per iteration) and f the fraction of the
communication that may overlap the backward pass (their §II: at most about
half). T(n) exceeds the ideal T(B)/n by three losses, reported per n:
the serial part s T(B)(1 - 1/n), the small local batch (1 - s)(T(b) -
T(B)/n) (GEMMs on b rows run less efficiently, fully connected layers
most), and the visible communication. n > B leaves nodes without samples.
"""

import math
from dataclasses import dataclass

from .network import comm_time
from .summary import human_bytes

LOSSES = ("serial fraction", "small local batch", "communication")


@dataclass
class ScalingPoint:
    """The prediction for one node count."""

    nodes: int
    local_batch: float
    compute_s: float = math.nan
    comm_s: float = math.nan  # visible (not overlapped) communication
    iteration_s: float = math.nan
    speedup: float = math.nan
    efficiency: float = math.nan
    losses: dict = None  # LOSSES -> seconds over the ideal T(B)/n

    @property
    def valid(self):
        return self.local_batch >= 1

    @property
    def main_loss(self):
        return max(self.losses, key=self.losses.get) if self.losses else "b < 1"


def predict_scaling(
    compute,
    global_batch,
    nodes,
    nbytes,
    network,
    scheme="ring",
    serial_fraction=0.0,
    overlap=0.0,
    comm=None,
):
    """``ScalingPoint`` per node count (see the module doc); ``compute`` has ``step_time(b)``.

    ``comm(n)``: seconds of the gradient exchange among n workers, when another model than
    ``scheme`` over one ``network`` gives it (``minidl predict --levels``: per level)."""
    if not 0.0 <= serial_fraction < 1.0 or not 0.0 <= overlap <= 1.0:
        raise ValueError(
            f"predict: the serial fraction ({serial_fraction}) must lie in [0, 1) and "
            f"the overlap ({overlap}) in [0, 1]"
        )
    s = serial_fraction
    single = compute.step_time(global_batch).total_s
    points = []
    for n in nodes:
        if n < 1:
            raise ValueError(f"predict: node counts must be >= 1, got {n}")
        if n > global_batch:
            points.append(ScalingPoint(n, global_batch / n))
            continue
        b = math.ceil(global_batch / n)
        step = compute.step_time(b)
        t_comp = s * single + (1 - s) * step.total_s
        exchange = comm(n) if comm is not None else comm_time(scheme, nbytes, n, network)
        visible = exchange - min(overlap * exchange, (1 - s) * step.backward_s)
        total = t_comp + visible
        losses = {
            "serial fraction": s * single * (1 - 1 / n),
            "small local batch": (1 - s) * (step.total_s - single / n),
            "communication": visible,
        }
        speedup = single / total if total > 0 else math.nan
        points.append(ScalingPoint(n, b, t_comp, visible, total, speedup, speedup / n, losses))
    return points


def efficiency_by_kind(compute, big, small, min_share=0.0):
    """{layer type: per-sample efficiency at local batch ``small`` relative to ``big``} (1 = ideal).

    (t(big) / big) / (t(small) / small) summed over the layers of each type;
    types with less than ``min_share`` of the compute time at ``small`` are left out.
    """
    kinds = compute.kinds
    at_big, at_small = compute.step_time(big), compute.step_time(small)
    out = {}
    for kind in dict.fromkeys(kinds.values()):
        t_big = sum(sum(at_big.layers[n]) for n, k in kinds.items() if k == kind)
        t_small = sum(sum(at_small.layers[n]) for n, k in kinds.items() if k == kind)
        if t_small > max(min_share * at_small.total_s, 0.0) and t_big > 0:
            out[kind] = (t_big / big) / (t_small / small)
    return out


def _efficiency_line(compute, global_batch, b):
    eff = efficiency_by_kind(compute, global_batch, b, min_share=0.05)
    text = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(eff.items(), key=lambda kv: kv[1]))
    poor = [k for k, v in eff.items() if v < 0.5]
    return (
        f"per-sample efficiency at b={b} relative to b={global_batch} (layer types with 5% of "
        f"the time or more): {text}"
        + (
            f"; below 50%: {', '.join(poor)} (too few samples to fill their operations)"
            if poor
            else ""
        )
    )


def explain(points, compute, global_batch, nbytes, scheme, serial_fraction):
    """Sentences on where scaling stalls and why."""
    valid = [p for p in points if p.valid]
    lines = []
    if not valid:
        return ["no node count leaves at least one sample per node"]
    best = max(valid, key=lambda p: p.speedup)
    lines.append(
        f"best speedup {best.speedup:.1f} at n={best.nodes} "
        f"(efficiency {100 * best.efficiency:.0f}%)"
    )
    bound = next((p for p in valid if p.nodes > 1 and p.comm_s >= p.compute_s), None)
    if bound is not None:
        lines.append(
            f"communication-bound from n={bound.nodes}: the {scheme} exchange of "
            f"{human_bytes(nbytes)} takes {1e3 * bound.comm_s:.1f} ms, compute "
            f"{1e3 * bound.compute_s:.1f} ms"
        )
    low = next((p for p in valid if p.efficiency < 0.5), None)
    if low is not None:
        share = {k: f"{1e3 * v:.1f} ms" for k, v in low.losses.items()}
        lines.append(
            f"efficiency falls below 50% at n={low.nodes} (b={low.local_batch}), mainly "
            f"from {low.main_loss} (losses over the ideal: {share})"
        )
    smallest = min(valid, key=lambda p: p.local_batch)
    for b in sorted(
        {p.local_batch for p in (low, smallest) if p is not None and p.local_batch < global_batch},
        reverse=True,
    ):
        lines.append(_efficiency_line(compute, global_batch, b))
    if serial_fraction > 0:
        lines.append(
            f"Amdahl: the non-scaling fraction {serial_fraction:g} caps the speedup at "
            f"{1 / serial_fraction:.0f}"
        )
    if len(valid) < len(points):
        lines.append(
            f"n <= B: {', '.join(str(p.nodes) for p in points if not p.valid)} nodes "
            f"exceed the global batch {global_batch} (b = B/n < 1)"
        )
    return lines


def format_prediction(points):
    head = ("n", "b", "compute ms", "comm ms", "iteration ms", "speedup", "efficiency", "main loss")
    rows = []
    for p in points:
        if not p.valid:
            rows.append((str(p.nodes), f"{p.local_batch:.2g}", "-", "-", "-", "-", "-", "n > B"))
            continue
        rows.append(
            (
                str(p.nodes),
                str(p.local_batch),
                f"{1e3 * p.compute_s:.2f}",
                f"{1e3 * p.comm_s:.2f}",
                f"{1e3 * p.iteration_s:.2f}",
                f"{p.speedup:.2f}",
                f"{100 * p.efficiency:.0f}%",
                p.main_loss if p.nodes > 1 else "",
            )
        )
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.rjust(w) if i < 7 else c for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(head), "-" * len(fmt(head))] + [fmt(r) for r in rows])
