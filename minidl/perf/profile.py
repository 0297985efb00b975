"""``minidl profile``: measured per-layer forward and backward time and memory of a training step.

A step is forward, cross-entropy loss, backward and a momentum-SGD update on
a synthetic batch. Per-layer times come from a ``LayerTimer`` (medians over
the profiled steps); the loss and the update are rows of their own. The
profiled steps alternate with plain, uninstrumented steps, whose median is
the reference the rows are checked against ("rows cover X% of a plain
step"). Memory comes from one more step under ``tracemalloc`` (NumPy
reports its buffers to it): what each layer's forward leaves allocated (its
output and what it saves for backward) and its peak; on a GPU, the growth of
CuPy's memory pool.
"""

import time
import tracemalloc
from dataclasses import dataclass

import numpy as np

from .. import functional as F
from .. import optim
from ..autograd import Tensor
from ..backend import cupy_module, synchronize, to_device
from .instrument import leaf_modules, wrapped_forwards
from .layer_timer import LayerTimer
from .summary import aligned, human_bytes


@dataclass
class LayerProfile:
    name: str
    kind: str
    forward_s: float = 0.0
    backward_s: float = 0.0
    output_bytes: int = 0
    retained_bytes: int = 0
    peak_bytes: int = 0

    @property
    def total_s(self):
        return self.forward_s + self.backward_s


@dataclass
class Profile:
    """Per-layer medians of one model at one batch size, and the step they belong to."""

    batch: int
    layers: list
    loss_s: float  # cross-entropy forward and backward, zero_grad, the engine between layers
    update_s: float  # optimizer step (zero_grad included)
    step_s: float  # median of plain, uninstrumented steps
    profiled_step_s: float  # median of the profiled steps

    def rows_s(self):
        """The sum of the per-layer, loss and update rows."""
        return sum(layer.total_s for layer in self.layers) + self.loss_s + self.update_s

    def coverage(self):
        """rows_s() / step_s: how much of a plain step the rows account for."""
        return self.rows_s() / self.step_s

    def by_type(self):
        """One row per layer type, summing its layers (Keuper & Pfreundt's Figs. 5 and 6 view)."""
        kinds = {}
        for layer in self.layers:
            row = kinds.setdefault(layer.kind, LayerProfile(layer.kind, ""))
            row.forward_s += layer.forward_s
            row.backward_s += layer.backward_s
            row.output_bytes += layer.output_bytes
            row.retained_bytes += layer.retained_bytes
            row.peak_bytes = max(row.peak_bytes, layer.peak_bytes)
            row.kind = f"{sum(1 for l in self.layers if l.kind == layer.kind)} layers"
        return list(kinds.values())


def _median(values):
    return float(np.median(values)) if values else 0.0


class TrainingStep:
    """A synthetic training step of ``model``: fixed random inputs and labels, momentum SGD.

    ``run()`` does forward, cross-entropy, backward and the update, and
    returns its seconds; it is the plain step the profile is checked against.
    """

    def __init__(self, model, input_shape, batch, device="cpu", seed=0):
        rng = np.random.default_rng(seed)
        self.model, self.device = model, device
        dtype = next(model.parameters()).dtype
        self.x = Tensor(
            to_device(rng.standard_normal((batch,) + tuple(input_shape)).astype(dtype), device)
        )
        classes = model(self.x).shape[1]
        self.y = rng.integers(0, classes, batch)
        self.optimizer = optim.Momentum(model.parameters(), lr=1e-3, momentum=0.9)

    def sync(self):
        if self.device != "cpu":
            synchronize()

    def run(self, marks=None):
        """One step; with ``marks`` (a list), appends the times after forward, loss,
        backward, update."""
        clock = time.perf_counter
        self.sync()
        start = clock()
        logits = self.model(self.x)
        self.sync()
        t_forward = clock()
        loss = F.cross_entropy(logits, self.y)
        self.sync()
        t_loss = clock()
        self.optimizer.zero_grad()
        loss.backward()
        self.sync()
        t_backward = clock()
        self.optimizer.step()
        self.sync()
        end = clock()
        if marks is not None:
            marks.append((start, t_forward, t_loss, t_backward, end))
        return end - start


def _memory_pass(step):
    """{layer: (output bytes, retained bytes, peak bytes)} from one step under tracemalloc
    or the CuPy pool."""
    found = {}
    pool = cupy_module().get_default_memory_pool() if step.device != "cpu" else None

    def make(name, module, original):
        def forward(x, *args, **kwargs):
            if pool is not None:
                before = pool.used_bytes()
                y = original(x, *args, **kwargs)
                synchronize()
                retained, peak = pool.used_bytes() - before, 0
            else:
                before = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                y = original(x, *args, **kwargs)
                current, top = tracemalloc.get_traced_memory()
                retained, peak = current - before, top - before
            found[name] = (int(getattr(y, "data", y).nbytes), retained, peak)
            return y

        return forward

    with wrapped_forwards(step.model, make):
        if pool is None:
            tracemalloc.start()
        try:
            step.run()
        finally:
            if pool is None:
                tracemalloc.stop()
    return found


def profile_model(model, input_shape, batch, steps=5, warmup=2, device="cpu", memory=True):
    """``Profile`` of ``steps`` training steps (after ``warmup``) at ``batch``."""
    if steps < 1 or batch < 1:
        raise ValueError(f"profile: steps ({steps}) and batch ({batch}) must be >= 1")
    step = TrainingStep(model, input_shape, batch, device)
    for _ in range(warmup):
        step.run()
    per_step = []
    current = {}
    timer = LayerTimer(
        model,
        lambda name, phase, start, end: current.__setitem__(
            (name, phase), current.get((name, phase), 0.0) + end - start
        ),
        device=device,
    )
    plain, marks = [], []
    for _ in range(steps):
        plain.append(step.run())
        current = {}
        with timer:
            step.run(marks)
        per_step.append(current)
    names = [(name, type(m).__name__) for name, m in leaf_modules(model)]
    layers = [
        LayerProfile(
            name,
            kind,
            _median([s.get((name, "forward"), 0.0) for s in per_step]),
            _median([s.get((name, "backward"), 0.0) for s in per_step]),
        )
        for name, kind in names
    ]
    loss_s, update_s, profiled = [], [], []
    for (start, t_forward, t_loss, t_backward, end), s in zip(marks, per_step):
        layer_backward = sum(v for (_, phase), v in s.items() if phase == "backward")
        loss_s.append(t_loss - t_forward + max(t_backward - t_loss - layer_backward, 0.0))
        update_s.append(end - t_backward)
        profiled.append(end - start)
    if memory:
        found = _memory_pass(step)
        for layer in layers:
            layer.output_bytes, layer.retained_bytes, layer.peak_bytes = found.get(
                layer.name, (0, 0, 0)
            )
    return Profile(
        batch, layers, _median(loss_s), _median(update_s), _median(plain), _median(profiled)
    )


def format_profile(profile, title="", by_type=False):
    """Layers (or layer types) sorted by time, with their share of all rows and the check
    against a plain step."""
    head = ("layer", "type", "fwd ms", "bwd ms", "total ms", "share", "output", "retained", "peak")
    step, total = profile.step_s, profile.rows_s()
    rows = []
    for layer in sorted(profile.by_type() if by_type else profile.layers, key=lambda l: -l.total_s):
        rows.append(
            (
                layer.name,
                layer.kind,
                f"{layer.forward_s * 1e3:.3f}",
                f"{layer.backward_s * 1e3:.3f}",
                f"{layer.total_s * 1e3:.3f}",
                f"{100 * layer.total_s / total:.1f}%",
                human_bytes(layer.output_bytes),
                human_bytes(layer.retained_bytes),
                human_bytes(layer.peak_bytes),
            )
        )
    for label, seconds in (("loss", profile.loss_s), ("update", profile.update_s)):
        rows.append(
            (label, "", "", "", f"{seconds * 1e3:.3f}", f"{100 * seconds / total:.1f}%", "", "", "")
        )
    fmt = aligned(rows + [head], 2)
    rule = "-" * len(fmt(head))
    lines = (
        [f"{title} batch {profile.batch}, medians over the profiled steps".strip(), fmt(head), rule]
        + [fmt(r) for r in rows]
        + [rule]
    )
    lines.append(
        f"sum of rows {total * 1e3:.3f} ms (the shares' 100%); plain step {step * 1e3:.3f} ms "
        f"(median, not profiled); the rows cover {100 * profile.coverage():.0f}% of it; "
        f"a profiled step takes {profile.profiled_step_s * 1e3:.3f} ms"
    )
    return "\n".join(lines)
