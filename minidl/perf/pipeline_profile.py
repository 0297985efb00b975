"""What each pipeline stage costs the simulator: measured time and activation bytes.

A cut (``minidl.dist.pipeline.Partition``, e.g. ``cut_by_cost`` of these times) puts
the contiguous layers ``bounds[k] = (start, stop)`` on stage k. ``layer_times`` times
each layer's forward and backward on one micro-batch (with ``minidl.perf``'s
profiler); ``stage_costs`` sums the layers' times per stage,
the ``forward_costs`` and ``backward_costs`` that ``pipeline_simulate.simulate``
takes. ``activation_bytes`` is what one micro-batch leaves on a stage until its
backward: the stage's input and every layer's output (the arrays the autograd
graph keeps), and ``peak_bytes`` the most a rank holds at once along a simulated
timeline.
"""

from minidl.autograd import Tensor
from minidl.perf.memory import peak_in_flight
from minidl.perf.pipeline_simulate import stage_of
from minidl.perf.profile import profile_model


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
    """Per rank, the most activation bytes it holds at once along ``simulation``'s timeline
    (``peak_in_flight`` of its forwards and backwards)."""
    ranks, chunks = simulation.ranks, range(simulation.chunks)
    return [
        peak_in_flight(
            [event.instruction for event in events],
            [per_stage_bytes[stage_of(rank, c, ranks)] for c in chunks],
        )
        for rank, events in enumerate(simulation.timeline)
    ]
