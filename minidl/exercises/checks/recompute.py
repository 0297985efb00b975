"""Checks of the recomputation exercise (14.x): minidl/reference/recompute.py.

The oracle is one training step of the same float64 chain (convolution, batch norm, dropout,
fully connected layers) by minidl's autograd without recomputation, from the same seed: the
gradients, the batch-norm buffers and the random stream after the step must be its. What
the forward hands to backward is measured too: the segments' inputs, not every activation.
"""

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import random
from minidl import recompute as tuned_recompute
from minidl.exercises.checks.tuned import call_watching, expect_left_alone, forbids
from minidl.intmath import block_bounds
from minidl.perf.graph_memory import graph_bytes
from minidl.reference.recompute import checkpointed_backward, checkpointed_forward

from .. import exercise, expect_close, expect_true

RECOMPUTE = "minidl/reference/recompute.py"
LAYERS = 10
WHY = "x is the caller's batch, and grad, the output's gradient, is shared"


def chain():
    """A small float64 network with every kind of state a rerun may disturb."""
    md.manual_seed(5)
    model = L.Sequential(
        L.Conv2d(2, 4, 3, padding=1),
        L.BatchNorm2d(4),
        L.ReLU(),
        L.Dropout(0.3),
        L.Flatten(),
        L.Linear(4 * 6 * 6, 16),
        L.BatchNorm1d(16),
        L.Tanh(),
        L.Dropout(0.5),
        L.Linear(16, 5),
    )
    return model.to("float64")


def plain_step(x, y, segments, seed):
    """The chain after one plain forward and backward from ``seed``, the input's gradient, the
    next draws of the random stream, and the bytes of the inputs of ``segments`` segments."""
    model, starts = chain(), dict(block_bounds(LAYERS, segments))
    md.manual_seed(seed)
    out = x = md.tensor(x, dtype="float64", requires_grad=True)
    inputs = 0
    for index, layer in enumerate(model):
        inputs += out.data.nbytes if index in starts else 0
        out = layer(out)
    F.cross_entropy(out, y).backward()
    return model, x.grad, random.get_rng().random(4), inputs


def kept_bytes(saved):
    """Bytes of the arrays in ``saved`` (nested in tuples, lists and dicts), each once (a view
    counts as the array it views: it keeps all of it alive), and of the graphs behind the
    Tensors in it."""
    arrays, tensors, pending = {}, {}, [saved]
    while pending:
        item = pending.pop()
        if isinstance(item, md.Tensor):
            tensors[id(item)] = item
            pending.append(item.data)
        elif isinstance(item, np.ndarray):
            while isinstance(item.base, np.ndarray):
                item = item.base
            arrays[id(item)] = item
        elif isinstance(item, dict):
            pending += item.values()
        elif isinstance(item, (tuple, list)):
            pending += item
    return sum(a.nbytes for a in arrays.values()) + sum(map(graph_bytes, tensors.values()))


def compare_recompute(rng, batch, segments, seed):
    """One step of the chain on a random batch, cut into ``segments``, with the random draws
    from ``seed``: checkpointed against plain (gradients, buffers, the stream after), and the
    bytes the forward hands backward against the segments' inputs."""
    x, y = rng.standard_normal((batch, 2, 6, 6)), rng.integers(0, 5, batch)
    given = x.copy()
    plain, plain_dx, plain_after, inputs = plain_step(x, y, segments, seed)
    model, bounds = chain(), block_bounds(LAYERS, segments)
    md.manual_seed(seed)
    (out, saved), changed = call_watching(
        checkpointed_forward, {"layers": list(model), "bounds": bounds, "x": x}, free=("layers",)
    )
    expect_left_alone("checkpointed_forward", changed, WHY)
    expect_true(
        "checkpointed_forward returns the output as an array, without a graph",
        isinstance(out, np.ndarray),
        detail=f"got a {type(out).__name__}",
    )
    kept = kept_bytes(saved)
    expect_true(
        f"the forward keeps the inputs of the {segments} segments ({inputs} bytes), not every "
        "activation",
        kept <= inputs + 1024,
        detail=f"it hands backward {kept} bytes",
    )
    logits = md.tensor(out, dtype="float64", requires_grad=True)
    F.cross_entropy(logits, y).backward()
    inputs = {"layers": list(model), "bounds": bounds, "saved": saved, "grad": logits.grad}
    dx, changed = call_watching(checkpointed_backward, inputs, free=("layers", "saved"))
    expect_left_alone("checkpointed_backward", changed, WHY)
    expect_close("the chain's input x after the step", x, given, rtol=0, atol=0)
    after = random.get_rng().random(4)
    masks = "a rerun draws the first run's dropout masks: restore the snapshot taken before it"
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        expect_close(f"dL/d{name} ({masks})", p.grad, q.grad, rtol=1e-9, atol=1e-12)
    expect_close(f"dL/dx, the chain's input ({masks})", dx, plain_dx, rtol=1e-9, atol=1e-12)
    expect_close(
        "the random stream after the step (put the streams back where the first forward left them)",
        after,
        plain_after,
    )
    for (name, b), (_, c) in zip(model.named_buffers(), plain.named_buffers()):
        expect_close(f"{name} after the step (updated once, by the first run)", b.data, c.data)


@exercise(
    "14.1",
    "Recompute a segment: keep its input, run it again in backward",
    path=RECOMPUTE,
    hint="forward: under no_grad, save each segment's input and random.snapshot() before running "
    "its layers; backward, from the last segment: random.restore its snapshot, run its layers "
    "again on a Tensor of its input that requires grad, put back the random streams and the "
    "buffers as the first run left them, backpropagate grad, and pass the input's grad on",
)
@forbids(
    tuned_recompute.checkpoint,
    tuned_recompute.Recomputation,
    name="minidl's tuned recomputation (minidl.recompute)",
)
def check_recompute():
    compare_recompute(np.random.default_rng(31), batch=16, segments=3, seed=9)
