"""Per-layer costs of a ``Sequential`` for the simulator: measured time and activation bytes.

``layer_times`` times each layer's forward and backward on one micro-batch (the
median of ``repeats`` rounds after a warm-up one); ``cut_by_cost`` cuts the model
where the largest stage's cost is smallest; ``stage_costs`` sums the layers'
times per stage, the ``forward_costs`` and ``backward_costs`` that ``simulate``
takes. ``activation_bytes`` is what one micro-batch leaves on a stage until its
backward: the stage's input and every layer's output (the arrays the autograd
graph keeps), and ``peak_bytes`` the most a rank holds at once along a simulated
timeline.
"""

import time

import numpy as np

from minidl import backend
from minidl.autograd import Tensor
from minidl.dist.pipeline.schedules import stage_of
from minidl.dist.pipeline.stages import Partition, min_max_bounds


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
    """(forward seconds, backward seconds) per layer of ``model`` on the input array ``x``."""
    rounds = []
    for _ in range(repeats + 1):  # the first round warms up (algorithm choice, caches)
        times, h = [], x
        for layer in model:
            inp = Tensor(h, requires_grad=True)
            start = time.perf_counter()
            out = layer(inp)
            middle = time.perf_counter()
            out.backward(backend.get_array_module(out.data).ones_like(out.data))
            times.append((middle - start, time.perf_counter() - middle))
            h = out.data
        model.zero_grad()
        rounds.append(times)
    median = np.median(np.array(rounds[1:]), axis=0)
    return [(float(f), float(b)) for f, b in median]


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
