"""The reference (forward, backward) pairs as differentiable ops on minidl Tensors.

``linear = as_op(linear_forward, linear_backward)`` makes ``linear(x, w, b)``
a Tensor op: the Tensor arguments are the inputs that gradients flow to, in
the order ``backward`` returns their gradients; keyword arguments
(labels, kernel sizes, running statistics, a random generator) pass
through to ``forward`` unchanged. The tuned autograd engine then calls
``backward(dL/dy, cache)`` during ``Tensor.backward()``, so a model built
from reference ops trains, and can be compared with the same model built
from ``minidl.functional``.
"""

from ...autograd import Function
from .activations import (
    relu_backward,
    relu_forward,
    sigmoid_backward,
    sigmoid_forward,
    tanh_backward,
    tanh_forward,
)
from .batch_norm import batch_norm_backward, batch_norm_forward
from .dropout import dropout_backward, dropout_forward
from .linear import linear_backward, linear_forward
from .loss import softmax_cross_entropy_backward, softmax_cross_entropy_forward
from .lrn import lrn_backward, lrn_forward
from .pooling import avg_pool_backward, avg_pool_forward, max_pool_backward, max_pool_forward


class ReferenceOp(Function):
    """The ``Function`` that runs one reference pair; the pair and its keywords arrive as
    parameters."""

    def forward(self, *arrays, pair, params):
        forward, self.backward_rule = pair
        out, self.cache = forward(*arrays, **params)
        return out

    def backward(self, grad):
        return self.backward_rule(grad, self.cache)


def as_op(forward, backward):
    """A function of Tensors (and keywords) that runs ``forward`` and differentiates with
    ``backward``."""

    def op(*tensors, **params):
        return ReferenceOp.apply(*tensors, pair=(forward, backward), params=params)

    op.__name__ = forward.__name__.removesuffix("_forward")
    op.__doc__ = forward.__doc__
    return op


linear = as_op(linear_forward, linear_backward)
relu = as_op(relu_forward, relu_backward)
sigmoid = as_op(sigmoid_forward, sigmoid_backward)
tanh = as_op(tanh_forward, tanh_backward)
softmax_cross_entropy = as_op(softmax_cross_entropy_forward, softmax_cross_entropy_backward)
max_pool = as_op(max_pool_forward, max_pool_backward)
avg_pool = as_op(avg_pool_forward, avg_pool_backward)
batch_norm = as_op(batch_norm_forward, batch_norm_backward)
lrn = as_op(lrn_forward, lrn_backward)
dropout = as_op(dropout_forward, dropout_backward)
