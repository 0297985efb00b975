"""Bytes a tensor-parallel layout moves per step (what ``minidl.dist.tensor`` counts is checked
against it).

For a layer split over T ranks, on a local batch of m samples (b bytes a number):

============================  ==========================  ===============================
layer (plan word)             forward                     backward
============================  ==========================  ===============================
column ``Linear`` (C_in)      --                          allreduce m C_in b   (dx)
row ``Linear`` (C_out)        allreduce m C_out b         --
filter ``Conv2d``             --                          allreduce m C_in H W b   (dx)
input-channel ``Conv2d``      allreduce m C_out H' W' b   --
``+gather`` (output split)    all-gather m ceil(n/T) b    --
row/input on a whole input    --                          all-gather m ceil(n/T) b
group ``Conv2d`` (groups T)   --                          (its input split: nothing)
``batch`` (one weird trick)   --                          allreduce of its weights
last ``batch`` layer          all-gather ceil(m/T) n b    --
============================  ==========================  ===============================

where n is the size of the split output (or input) of one sample and ceil(n/T)
its largest block (the padded block every rank sends); a ``batch`` layer runs on
a block of the batch with whole weights, whose gradients are summed over the
group, and after the last one the blocks of the batch are gathered. The backward allreduce
of dx is absent when no layer before the split one has parameters (nothing
upstream wants the gradient). A column/row pair of fully connected layers thus
moves m (C_in + C_out) numbers per step, against the C_in C_out of its weight
gradient under data parallelism: Project Adam's trade-off (Chilimbi et al.
2014, as Ben-Nun & Hoefler 2019, section 5.2, tell it: m N (C_in + C_out)
against m C_in C_out over N layers). The data-parallel allreduce carries each
rank's blocks of the weights: ``gradient_bytes``.
"""

import math

import numpy as np

from ..autograd import Tensor, no_grad
from ..intmath import block_sizes
from ..layers import leaves


def layer_shapes(model, input_shape):
    """(input shape, output shape) of one sample for each leaf layer, in order; the layers run
    in evaluation mode, so no running statistic, batch count or random stream moves."""
    dtype = next((p.dtype for p in model.parameters()), np.float32)
    x = Tensor(np.zeros((1, *input_shape), dtype=dtype))
    layers = [layer for _, layer in leaves(model)]
    modes = [layer.training for layer in layers]
    shapes = []
    try:
        with no_grad():
            for layer in layers:
                layer.training = False
                y = layer(x)
                shapes.append((x.shape[1:], y.shape[1:]))
                x = y
    finally:
        for layer, mode in zip(layers, modes, strict=True):
            layer.training = mode
    return shapes


def _block(n_per_sample, split_size, tp):
    """Numbers per sample in the largest block of a split dimension of ``split_size``."""
    return n_per_sample // split_size * block_sizes(split_size, tp)[0]


def tensor_volume(model, plan, input_shape, batch, tp, itemsize=4) -> dict:
    """{"allreduce": bytes, "allgather": bytes} one rank hands to collectives in one step."""
    volume = {"allreduce": 0, "allgather": 0}
    if tp == 1:
        return volume
    upstream_params, split = False, False
    batch_layers = sum(word == "batch" for word in plan)
    for index, ((_, layer), word, (x_shape, y_shape)) in enumerate(
        zip(leaves(model), plan, layer_shapes(model, input_shape), strict=True)
    ):
        kind, _, gather = word.partition("+")
        x_n, y_n = math.prod(x_shape), math.prod(y_shape)
        if kind == "batch":
            volume["allreduce"] += sum(p.size for p in layer.parameters()) * itemsize
            if index == batch_layers - 1:  # the batch gathered after the last one
                volume["allgather"] += block_sizes(batch, tp)[0] * y_n * itemsize
        elif kind in ("column", "filter"):
            if upstream_params:
                volume["allreduce"] += batch * x_n * itemsize
            if gather:
                volume["allgather"] += (
                    batch * _block(y_n, y_shape[-1 if kind == "column" else 0], tp) * itemsize
                )
            split = not gather
        elif kind == "group":
            if not split:
                volume["allgather"] += batch * _block(x_n, x_shape[0], tp) * itemsize
            if gather:
                volume["allgather"] += batch * _block(y_n, y_shape[0], tp) * itemsize
            split = not gather
        elif kind in ("row", "input"):
            volume["allreduce"] += batch * y_n * itemsize
            if not split:
                volume["allgather"] += (
                    batch * _block(x_n, x_shape[-1 if kind == "row" else 0], tp) * itemsize
                )
            split = False
        upstream_params = upstream_params or any(True for _ in layer.parameters())
    return volume


def gradient_bytes(model, plan, tp, rank, itemsize=4) -> int:
    """Bytes of the gradient rank ``rank`` of a tp group holds: its blocks, and the rest whole."""
    return sum(block_numbers(model, plan, tp, rank)) * itemsize


def block_numbers(model, plan, tp, rank):
    """The numbers of each parameter (in model order) that rank ``rank`` of a tp group holds:
    its block of a split layer's, the others whole."""
    split_axis = {"column": 0, "filter": 0, "group": 0, "row": 1, "input": 1}
    numbers = []
    for (_, layer), word in zip(leaves(model), plan, strict=True):
        kind = word.partition("+")[0]
        for name, p in layer.named_parameters():
            n = p.size
            if kind in split_axis and not (name == "bias" and kind in ("row", "input")):
                axis = 0 if name == "bias" else split_axis[kind]
                width = p.shape[axis]
                n = n // width * block_sizes(width, tp)[rank]
            numbers.append(n)
    return numbers
