"""What one layer costs, and the registry that maps layer types to their counters.

A *counter* knows two things about one layer type: the output shape it
produces for an input shape, and its ``LayerCost`` (multiply-accumulates,
FLOPs, work and depth of the forward and backward passes). Counters are
registered by the name of the layer's class, so ``minidl.perf`` counts
layer families it does not import (and subclasses inherit their parent's
counter through the MRO).

Units and conventions (used by every counter):

* **MACs**: multiply-accumulates of the matrix products (convolutions and
  fully connected layers). ``FLOPs = 2 * MACs`` for those products, plus one
  FLOP per other elementary operation (bias additions, comparisons,
  activations, normalisation arithmetic). Transcendental functions count
  as one FLOP each.
* **Work W and depth D** follow Ben-Nun & Hoefler (2019), Table 4 and
  Table 6: W counts elementary operations (one per multiply-accumulate of a
  product, one per comparison of a max, ...), D the longest chain of
  dependent operations; a reduction of n values has depth ceil(log2 n).
  Layers of a chain add their depths (Ben-Nun & Hoefler 2019, §3.3.1).
* The backward pass computes the weight gradient of every layer with
  parameters and the input gradient only where the input needs one (the
  first layer's input is data), as the autograd engine does. Backward depth
  is the larger of the two, since both start from the output gradient.
"""

import math
from dataclasses import dataclass, field

CONVENTIONS = ("corrected", "paper")


@dataclass
class LayerCost:
    """Costs of one layer call for a whole batch (shapes include the batch)."""

    name: str
    kind: str
    input_shape: tuple
    output_shape: tuple
    params: int = 0
    macs: int = 0  # forward multiply-accumulates
    backward_macs: int = 0  # weight-gradient plus input-gradient multiply-accumulates
    forward_flops: int = 0
    backward_flops: int = 0
    work: int = 0  # Ben-Nun & Hoefler's W of the forward pass
    depth: int = 0  # Ben-Nun & Hoefler's D of the forward pass
    backward_work: int = 0
    backward_depth: int = 0
    activation_bytes: int = 0  # the output this layer keeps for the next one
    param_bytes: int = 0
    input_grad: bool = False  # whether backward computes the input gradient
    counted: bool = True  # False: no counter knows this layer type
    notes: list = field(default_factory=list)

    @property
    def batch(self):
        return self.input_shape[0]


def elements(shape):
    """The number of values in an array of ``shape``."""
    return math.prod(shape)


class Counter:
    """Base of per-layer-type counters: override ``output_shape`` and ``count``.

    ``count(module, x_shape, y_shape, needs_input_grad, convention)`` returns
    a dict of ``LayerCost`` fields (macs, flops, work, depth, ...); the walker
    fills in the name, shapes, parameters and memory.
    """

    def output_shape(self, module, x_shape):
        return x_shape

    def count(self, module, x_shape, y_shape, needs_input_grad, convention):
        raise NotImplementedError(type(self).__name__)


COUNTERS = {}


def register(*type_names):
    """Class decorator: an instance of the decorated ``Counter`` counts these layer types."""

    def decorate(cls):
        for name in type_names:
            COUNTERS[name] = cls()
        return cls

    return decorate


def counter_for(module):
    """The counter registered for ``module``'s class or its nearest base; None if none is."""
    for cls in type(module).__mro__:
        found = COUNTERS.get(cls.__name__)
        if found is not None:
            return found
    return None


def check_convention(convention):
    if convention not in CONVENTIONS:
        raise ValueError(
            f"unknown counting convention {convention!r}: choose one of {', '.join(CONVENTIONS)}"
        )
    return convention
