"""``minidl predict --grids N``: the dp x tp grids of N ranks ranked by predicted step time.

For a grid of D data-parallel replicas of T tensor-parallel ranks, global batch B:

    local batch   b = ceil(B / D)
    compute       T_comp = t(b) / T        (t: one process's step at batch b; the ideal split)
    tp messages   T_tp = allreduce(V_ar, T) + allreduce(T V_ag, T) / 2
    dp gradients  T_dp = allreduce(G, D)
    step          T_comp + T_tp + T_dp

with V_ar and V_ag the allreduce and all-gather bytes of ``tensor_volume`` (an
all-gather of T blocks moves what half an allreduce of their sum does, on a
ring), G a rank's gradient bytes (``gradient_bytes``, its blocks of the split
layers), and allreduce(n, p) the time of ``minidl.perf.network.comm_time``. The
compute term assumes every layer's work divides by T; pooling and activations on
replicated data do not, so T > 1 is predicted optimistically. A grid whose T is
wider than a split layer is left out.
"""

import math
from dataclasses import dataclass

from .network import comm_time
from .tensor_volume import gradient_bytes, tensor_volume


@dataclass
class GridPoint:
    grid: str
    local_batch: int
    tp_bytes: int
    dp_bytes: int
    compute_s: float
    comm_s: float

    @property
    def step_s(self):
        return self.compute_s + self.comm_s


def rank_grids(model, shape, words, narrowest, ranks, batch, compute, network, scheme="ring"):
    """Every feasible dp x tp grid of ``ranks``, fastest predicted step first.

    ``words``: the plan; ``narrowest``: the width of its narrowest split layer
    (no tp wider fits); ``compute.step_time(b).total_s``: one process's step at
    batch b.
    """
    itemsize = next(model.parameters()).dtype.itemsize
    points = []
    for tp in (t for t in range(1, ranks + 1) if ranks % t == 0 and t <= narrowest):
        dp = ranks // tp
        local = math.ceil(batch / dp)
        volume = tensor_volume(model, words, shape, local, tp, itemsize)
        grads = gradient_bytes(model, words, tp, 0, itemsize)
        comm = (
            comm_time(scheme, volume["allreduce"], tp, network)
            + comm_time(scheme, tp * volume["allgather"], tp, network) / 2
            + comm_time(scheme, grads, dp, network)
        )
        points.append(
            GridPoint(
                grid=f"dp={dp},tp={tp}",
                local_batch=local,
                tp_bytes=sum(volume.values()),
                dp_bytes=grads if dp > 1 else 0,
                compute_s=compute.step_time(local).total_s / tp,
                comm_s=comm,
            )
        )
    return sorted(points, key=lambda p: p.step_s)


def format_grids(points):
    """The ranking as a text table."""
    head = (
        f"{'rank':>4}  {'grid':<12}{'b':>6}  {'tp bytes/step':>14}  {'dp bytes/step':>14}  "
        f"{'compute s':>10}  {'comm s':>10}  {'step s':>10}"
    )
    lines = [head, "-" * len(head)]
    for i, p in enumerate(points, 1):
        lines.append(
            f"{i:>4}  {p.grid:<12}{p.local_batch:>6}  {p.tp_bytes:>14,}  {p.dp_bytes:>14,}  "
            f"{p.compute_s:>10.5f}  {p.comm_s:>10.5f}  {p.step_s:>10.5f}"
        )
    return "\n".join(lines)
