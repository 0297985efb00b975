"""Hidden checks of the layer exercises: other batch sizes, classes and shapes."""

import numpy as np

from minidl import functional as F
from minidl.reference.functional import loss

from .. import hidden_check
from ..checks.layers import compare_backward, compare_linear


@hidden_check("2.1", "batch 17, 9 inputs, 6 outputs")
def linear_wide():
    compare_linear(np.random.default_rng(2101), batch=17, inputs=9, outputs=6)


@hidden_check("2.2", "batch 32, 10 classes, large logits")
def softmax_cross_entropy_large():
    rng = np.random.default_rng(2201)
    labels = rng.integers(0, 10, 32)
    compare_backward(
        "softmax cross-entropy of (32, 10) logits",
        lambda z: loss.softmax_cross_entropy_forward(z, labels),
        loss.softmax_cross_entropy_backward,
        lambda z: F.cross_entropy(z, labels),
        [8 * rng.standard_normal((32, 10))],
        ["logits"],
        rng,
    )
