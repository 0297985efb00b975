"""Counting a whole model: a shape-propagating pass that asks each layer's counter.

``count_model(model, input_shape, batch)`` runs the model once on a batch of
one zero image with every counted leaf layer replaced by its counter's
output shape (no arithmetic, no convolution autotuning), so any container
structure works; leaves no counter knows run for real and are reported as
uncounted. A container with a counter of its own (a residual block: its add) runs
its layers and is counted after them. Counts are then taken for the requested batch: every counter
sees the shapes with the batch size put back.
"""

from dataclasses import dataclass

import numpy as np

from ..autograd import Tensor
from .costs import LayerCost, check_convention, counter_for, elements
from .instrument import leaf_modules, wrapped_forwards

TOTALLED = (
    "params",
    "macs",
    "backward_macs",
    "forward_flops",
    "backward_flops",
    "work",
    "depth",
    "backward_work",
    "backward_depth",
    "activation_bytes",
    "param_bytes",
)


@dataclass
class ModelCosts:
    """Per-layer costs of one model at one batch size, with totals over the layers."""

    layers: list
    batch: int
    input_shape: tuple
    convention: str
    num_parameters: int

    def total(self, field):
        """The sum of ``field`` over the layers (depths add: the layers form a chain)."""
        return sum(getattr(layer, field) for layer in self.layers)

    def totals(self):
        return {name: self.total(name) for name in TOTALLED}

    @property
    def uncounted(self):
        return [layer for layer in self.layers if not layer.counted]


def _own_parameters(module):
    return [p for p in module._parameters.values() if p is not None]


def _with_batch(shape, batch):
    return (batch,) + tuple(shape[1:])


def count_model(model, input_shape, batch=1, convention="corrected"):
    """``ModelCosts`` of ``model`` for inputs of ``input_shape`` (without the batch axis)."""
    check_convention(convention)
    if batch < 1:
        raise ValueError(f"count_model: batch must be >= 1, got {batch}")
    params = list(model.parameters())
    dtype = params[0].dtype if params else np.dtype("float32")
    records = []

    def make(name, module, original):
        counter = counter_for(module)

        def forward(x, *args, **kwargs):
            own = _own_parameters(module)
            needs_grad = isinstance(x, Tensor) and x.requires_grad
            if module._modules:  # a counted container: its layers ran (and were recorded) first
                y = original(x, *args, **kwargs)
                records.append((name, module, counter, tuple(x.shape), tuple(y.shape), needs_grad))
                return y
            if counter is None or args or kwargs or not isinstance(x, Tensor):
                y = original(x, *args, **kwargs)
                records.append((name, module, None, tuple(x.shape), tuple(y.shape), needs_grad))
                return y
            y_shape = tuple(counter.output_shape(module, tuple(x.shape)))
            records.append((name, module, counter, tuple(x.shape), y_shape, needs_grad))
            return Tensor(np.zeros(y_shape, dtype=dtype), requires_grad=needs_grad or bool(own))

        return forward

    counted = leaf_modules(model) + [
        (name, m) for name, m in model.named_modules() if m._modules and counter_for(m)
    ]
    with wrapped_forwards(model, make, counted):
        model(Tensor(np.zeros((1,) + tuple(input_shape), dtype=dtype)))

    layers, seen = [], {}
    for name, module, counter, x1, y1, needs_grad in records:
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}#{seen[name]}"
        x_shape, y_shape = _with_batch(x1, batch), _with_batch(y1, batch)
        own = _own_parameters(module) if seen[name] == 1 else []
        n_params = sum(int(p.size) for p in own)
        cost = LayerCost(
            label,
            type(module).__name__,
            x_shape,
            y_shape,
            params=n_params,
            param_bytes=sum(int(p.data.nbytes) for p in own),
            activation_bytes=elements(y_shape) * dtype.itemsize,
            input_grad=needs_grad,
        )
        if counter is None:
            cost.counted = False
            cost.notes.append("no counter for this layer type: FLOPs, work and depth not counted")
        else:
            for key, value in counter.count(
                module, x_shape, y_shape, needs_grad, convention
            ).items():
                setattr(cost, key, int(value))
        layers.append(cost)
    return ModelCosts(layers, batch, tuple(input_shape), convention, model.num_parameters())
