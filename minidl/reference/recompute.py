"""Recomputation of activations over a chain of layers (Chen et al. 2016, Training Deep Nets
with Sublinear Memory Cost, §4).

A chain x_l = f_l(x_{l-1}), l = 1..L, is backpropagated layer by layer from the last, and
layer l's backward needs what its forward saw (its input x_{l-1}, a dropout mask, the
normalised values of batch norm). Keeping all of it costs O(L) memory. Cut the chain into N
segments instead, segment k the layers s_k+1..e_k (e_k = s_{k+1}): the forward keeps only
each segment's input x_{s_k}, and the backward walks the segments from the last,

    for k = N-1, ..., 0:
        x_{e_k} = f_{e_k} o ... o f_{s_k+1}(x_{s_k})     again, recording the graph this time
        dL/dx_{s_k} = backward of that graph from dL/dx_{e_k}   (parameters' gradients too)

holding N inputs plus one segment's L/N activations: O(N + L/N), least at N = sqrt(L)
(2 sqrt(L)), for one more forward a step (Chen et al. §4.3).

Running a segment again must compute what its first run computed: the random draws
(dropout) start from the streams as they stood before its first run (``minidl.random``'s
``snapshot``/``restore``), and state that the first run updated in place (batch norm's
running statistics and batch count) is put back as that run left it. ``minidl.recompute``
does the same inside minidl's autograd, one graph node per segment.

An exercise region here must not call the tuned recomputation
(``minidl.recompute.checkpoint``): the check fails one that does, since the exercise is to
write the algorithm out.
"""

from minidl import random
from minidl.autograd import Tensor, no_grad


def checkpointed_forward(layers, bounds, x):
    """The output of ``layers`` (Modules, in order) on the array ``x``, and what backward
    needs: per segment ``(start, stop)`` of ``bounds`` (``minidl.intmath.block_bounds``), its
    input and the random streams before it. No graph is built, no activation kept."""
    saved = []
    # BEGIN EXERCISE 14.1
    with no_grad():
        for start, stop in bounds:
            saved.append((x, random.snapshot()))
            for layer in layers[start:stop]:
                x = layer(Tensor(x)).data
    # END EXERCISE 14.1
    return x, saved


def checkpointed_backward(layers, bounds, saved, grad):
    """dL/dx of the chain's input from ``grad`` = dL/d(output), each segment recomputed from
    ``saved`` (``checkpointed_forward``'s); the layers' parameters accumulate their ``.grad``."""
    # BEGIN EXERCISE 14.1
    for (start, stop), (x, draws) in reversed(list(zip(bounds, saved))):
        buffers = [b for layer in layers[start:stop] for _, b in layer.named_buffers()]
        first_run = [b.data.copy() for b in buffers]
        after = random.snapshot()
        random.restore(draws)
        x = Tensor(x, requires_grad=True)
        out = x
        for layer in layers[start:stop]:
            out = layer(out)
        random.restore(after)
        for b, value in zip(buffers, first_run):
            b.data[...] = value
        out.backward(grad)
        grad = x.grad
    # END EXERCISE 14.1
    return grad
