"""Where to cut a ``Sequential`` into pipeline stages, and what each stage costs the
pipeline simulator: measured time and activation bytes.

A ``Partition`` is a cut: stage k holds the contiguous layers ``bounds[k] =
(start, stop)``, with its cost and the cut's balance = max_k cost_k / mean_k cost_k
(a pipeline runs at the pace of its slowest stage; 1.0 is perfect).
``min_max_bounds`` is the contiguous cut that minimises the largest stage (a
linear-partition dynamic programme), whatever the per-layer costs:
``minidl.dist.pipeline.partition`` cuts by parameter count with it, ``cut_by_cost``
by measured time.

``layer_times`` times each layer's forward and backward on one micro-batch (with
``minidl.perf``'s profiler); ``stage_costs`` sums the layers' times per stage,
the ``forward_costs`` and ``backward_costs`` that ``pipeline_simulate.simulate``
takes. ``activation_bytes`` is what one micro-batch leaves on a stage until its
backward: the stage's input and every layer's output (the arrays the autograd
graph keeps), and ``peak_bytes`` the most a rank holds at once along a simulated
timeline.
"""

from dataclasses import dataclass

import numpy as np

from minidl.autograd import Tensor
from minidl.perf.pipeline_simulate import stage_of
from minidl.perf.profile import profile_model


@dataclass(frozen=True)
class Partition:
    """Where a model is cut: ``bounds[k] = (start, stop)`` layers of stage k and its cost."""

    bounds: tuple
    costs: tuple
    by: str

    @property
    def balance(self):
        """max / mean of the per-stage cost (1.0: every stage costs the same)."""
        mean = sum(self.costs) / len(self.costs)
        return max(self.costs) / mean if mean > 0 else 1.0

    def __len__(self):
        return len(self.bounds)


def min_max_bounds(costs, num_stages):
    """The contiguous cut into non-empty stages with the smallest largest-stage cost.

    best[k][j]: the least max-cost of cutting layers 0..j-1 into k stages;
    best[k][j] = min_i max(best[k-1][i], sum(costs[i:j])). Ties keep the earliest cut.
    """
    n = len(costs)
    prefix = np.concatenate([[0], np.cumsum(costs)]).tolist()
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0
    for k in range(1, num_stages + 1):
        for j in range(k, n - (num_stages - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    bounds, stop = [], n
    for k in range(num_stages, 0, -1):
        start = cut[k][stop]
        bounds.append((start, stop))
        stop = start
    return bounds[::-1]


def _trace(model, x):
    """Each layer's input and output Tensors for input array ``x`` (no timing)."""
    pairs = []
    for layer in model:
        inp = Tensor(x, requires_grad=True)
        out = layer(inp)
        pairs.append((inp, out))
        x = out.data
    return pairs


def layer_times(model, x, repeats=5):
    """(forward seconds, backward seconds) per layer of ``model`` for micro-batches shaped
    like the array ``x``: the medians ``perf.profile.profile_model`` measures over ``repeats``
    training steps after a warm-up one, summed per top-level layer. The steps train the
    model on random data: time a model whose weights do not matter."""
    found = profile_model(model, x.shape[1:], len(x), steps=repeats, warmup=1, memory=False)
    times = [[0.0, 0.0] for _ in model]
    for layer in found.layers:
        top = times[int(layer.name.split(".")[0])]
        top[0] += layer.forward_s
        top[1] += layer.backward_s
    return [(f, b) for f, b in times]


def cut_by_cost(costs, num_stages):
    """The ``Partition`` into ``num_stages`` contiguous stages that minimises the largest
    stage's summed ``costs`` (one number per layer)."""
    if not 1 <= num_stages <= len(costs):
        raise ValueError(f"cannot cut {len(costs)} layers into {num_stages} stages")
    bounds = min_max_bounds(list(costs), num_stages)
    return Partition(tuple(bounds), tuple(float(sum(costs[a:b])) for a, b in bounds), "time")


def stage_costs(times, partition):
    """(forward_costs, backward_costs): the layers' times summed per stage."""
    forward = [sum(f for f, _ in times[a:b]) for a, b in partition.bounds]
    backward = [sum(b_ for _, b_ in times[a:b]) for a, b in partition.bounds]
    return forward, backward


def activation_bytes(model, x, partition):
    """Bytes one micro-batch keeps on each stage: its input and each of its layers' outputs."""
    pairs = _trace(model, x)
    return [
        pairs[a][0].data.nbytes + sum(out.data.nbytes for _, out in pairs[a:b])
        for a, b in partition.bounds
    ]


def peak_bytes(simulation, per_stage_bytes):
    """Per rank, the most activation bytes it holds at once along ``simulation``'s timeline."""
    peaks = []
    for rank, events in enumerate(simulation.timeline):
        live = peak = 0
        for event in events:
            k = stage_of(rank, event.instruction.chunk, simulation.ranks)
            live += per_stage_bytes[k] if event.instruction.op == "forward" else -per_stage_bytes[k]
            peak = max(peak, live)
        peaks.append(peak)
    return peaks
