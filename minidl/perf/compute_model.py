"""Compute time of one training iteration as a function of the local batch size b.

Two sources:

* ``MeasuredCompute``: per-layer forward/backward times profiled on this
  machine at a few local batch sizes (``measure_compute``), interpolated
  linearly in b between them (times are close to affine in b: a fixed cost
  plus a per-sample cost) and extrapolated along the end segments.
* ``RooflineCompute``: per-layer counts (``count_model``) on a ``Machine``:
  each pass takes max(FLOPs / peak, bytes / bandwidth) + overhead, where the
  bytes are the layer's weights plus its input and output activations. A
  fully connected layer reads all its weights whatever b is, so below
  b ~ ridge/2 it is memory-bound and stops getting faster: the "degenerated
  GEMM" of Keuper & Pfreundt (2016, §III-B). ``calibrated(B, seconds)``
  rescales it to a given time per iteration (e.g. their Table I).

Both return a ``StepTime``: per-layer (forward, backward) seconds, the loss
and the optimizer update (which does not shrink with b).
"""

from dataclasses import dataclass

import numpy as np

from .costs import elements


@dataclass
class StepTime:
    """Seconds of one iteration at one local batch size, per layer and in total."""

    batch: int
    layers: dict  # name -> (forward_s, backward_s)
    loss_s: float = 0.0
    update_s: float = 0.0

    @property
    def forward_s(self):
        return sum(f for f, _ in self.layers.values()) + self.loss_s

    @property
    def backward_s(self):
        return sum(b for _, b in self.layers.values())

    @property
    def total_s(self):
        return self.forward_s + self.backward_s + self.update_s


def _interpolate(b, batches, values):
    """Piecewise-linear in b through the measured points, extended along the end segments.

    Below the smallest measured b the time is not allowed under the ideal
    t(b_min) * b / b_min (fewer samples never run more efficiently); one
    measured point alone scales in proportion to b.
    """
    if len(batches) == 1:
        return values[0] * b / batches[0]
    if batches[0] <= b <= batches[-1]:
        return float(np.interp(b, batches, values))
    i = 0 if b < batches[0] else -2
    slope = (values[i + 1] - values[i]) / (batches[i + 1] - batches[i])
    line = values[i] + slope * (b - batches[i])
    return max(line, values[0] * b / batches[0]) if b < batches[0] else line


class MeasuredCompute:
    """Per-layer times from ``Profile``s at several batch sizes (``{batch: Profile}``)."""

    def __init__(self, profiles):
        if not profiles:
            raise ValueError("MeasuredCompute needs at least one profile")
        self.profiles = dict(sorted(profiles.items()))
        self.batches = list(self.profiles)
        self.kinds = {layer.name: layer.kind for layer in next(iter(self.profiles.values())).layers}

    def _series(self, get):
        return [get(p) for p in self.profiles.values()]

    def step_time(self, b):
        """``StepTime`` at local batch ``b`` (interpolated between the measured sizes)."""
        layers = {}
        for i, name in enumerate(self.kinds):
            fwd = self._series(lambda p: p.layers[i].forward_s)
            bwd = self._series(lambda p: p.layers[i].backward_s)
            layers[name] = (_interpolate(b, self.batches, fwd), _interpolate(b, self.batches, bwd))
        return StepTime(
            b,
            layers,
            _interpolate(b, self.batches, self._series(lambda p: p.loss_s)),
            _interpolate(b, self.batches, self._series(lambda p: p.update_s)),
        )


def measure_compute(model, input_shape, batches, steps=3, warmup=1, device="cpu"):
    """A ``MeasuredCompute`` from profiling ``model`` at each local batch size in ``batches``."""
    from .profile import profile_model

    return MeasuredCompute(
        {
            b: profile_model(model, input_shape, b, steps, warmup, device, memory=False)
            for b in sorted(set(batches))
        }
    )


def roofline_time(machine, flops, nbytes):
    """max(flops / peak, bytes / bandwidth) + the fixed cost of one operation (0 for no work)."""
    if flops == 0 and nbytes == 0:
        return 0.0
    return max(flops / machine.peak_flops, nbytes / machine.bandwidth) + machine.overhead_s


class RooflineCompute:
    """Per-layer roofline times from per-sample counts (a ``ModelCosts`` at batch 1)."""

    def __init__(self, costs, machine, itemsize=4, scale=1.0, update_arrays=5):
        if costs.batch != 1:
            raise ValueError(f"RooflineCompute needs counts for batch 1, got batch {costs.batch}")
        self.costs, self.machine, self.itemsize, self.scale = costs, machine, itemsize, scale
        self.update_arrays = update_arrays  # momentum SGD reads w, g, v and writes w, v
        self.kinds = {layer.name: layer.kind for layer in costs.layers}

    def layer_time(self, layer, b):
        """(forward_s, backward_s) of one layer at local batch ``b``; layers without
        arithmetic are views."""
        m, size = self.machine, self.itemsize
        if layer.forward_flops == 0:
            return 0.0, 0.0
        acts = b * (elements(layer.input_shape) + elements(layer.output_shape)) * size
        weights = layer.params * size
        forward = roofline_time(m, layer.forward_flops * b, weights + acts)
        passes = (layer.params > 0) + layer.input_grad
        backward = roofline_time(m, layer.backward_flops * b, passes * (weights + acts))
        return forward * self.scale, backward * self.scale

    def step_time(self, b):
        layers = {layer.name: self.layer_time(layer, b) for layer in self.costs.layers}
        update = (
            self.update_arrays * self.itemsize * self.costs.num_parameters / self.machine.bandwidth
            + self.machine.overhead_s * sum(1 for layer in self.costs.layers if layer.params)
        )
        return StepTime(b, layers, 0.0, update * self.scale)

    def with_scale(self, scale):
        """The same model with another overall time scale."""
        return RooflineCompute(self.costs, self.machine, self.itemsize, scale, self.update_arrays)

    def calibrated(self, batch, seconds):
        """A copy whose iteration at ``batch`` takes ``seconds`` (all times scaled alike)."""
        return self.with_scale(seconds / self.with_scale(1.0).step_time(batch).total_s)
