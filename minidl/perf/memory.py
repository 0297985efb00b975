"""The bytes one rank holds while it trains, of four kinds: parameters, gradients, optimizer
state and activations (what ``minidl summary`` predicts and a run's ``"memory"`` records
measure).

With P parameters of b bytes each (4 for float32, 8 for float64) and K state arrays per
parameter (``STATE_ARRAYS``: what each update rule's ``update`` creates), one process holds
P b of weights, P b of gradients and K P b of state. Data parallelism replicates all three.
ZeRO (Rajbhandari et al. 2020, section 5) on N ranks gives rank r the share s_r that
``ZeroOptimizer`` cuts: the sum over its gradient buckets (B numbers each) of ceil(B / N) for
r < B mod N, else floor(B / N) (``zero_share``; P / N to one number per bucket):

    stage 1   P b + P b + K s_r b                  (optimizer state sharded)
    stage 2   P b + s_r b + K s_r b                (gradients too)
    stage 3   (s_r + A) b + s_r b + K s_r b        (weights too; A: the largest layer's
                                                    parameters, gathered while it runs)

Activations (``layer_activations``): between forward and backward the graph keeps, per
layer, its output (not when it is a view of its input: a flatten of a row-major array)
and what its backward needs besides its input and output (``saved``):

    Conv2d            the algorithm's kept state, when a backward pass reuses it (im2col's
                      columns N H' W' C k_h k_w, Winograd's input tiles, FFT's spectra)
    MaxPool2d         the offset of each window's maximum: one byte per output
    LocalResponseNorm two arrays like its input (the scale and its power)
    Dropout           the mask, like its input
    BatchNorm         the normalised input, and 1/sigma per channel
    Flatten           a copy of its input when that is laid out channels-last (the output of
                      an im2col or Winograd convolution, through pooling and activations)

summed over the layers; the batch and the layers before the first one with parameters
build no graph. A convolution's algorithm is the layer's own, or the fixed rule's
(``algo="auto"`` in a deterministic run); Winograd's output is a view of whole m x m tiles,
which count. Recomputing N segments (Chen et al. 2016) keeps only the segments' inputs and
the model's output between forward and backward, and in backward one segment's activations
at a time: ``activation_bytes`` gives the largest segment's besides. A tensor-parallel rank
holds its blocks (``split_activations``).

A pipeline stage keeps each micro-batch's activations from its forward to its backward:
``peak_in_flight`` walks a schedule's instruction list. On stage k of P with M micro-batches,
1F1B and PipeDream (its order) keep min(M, P - k) (the P - k - 1 warm-up forwards and one
more), GPipe all M, naive one; interleaved 1F1B with v chunks keeps on rank r at most
min(v M, (v - 1) P + 2 (P - r) - 1) chunk activations: its warm-up of (v - 1) P + 2 (P - r - 1)
forwards, and one more.
"""

from dataclasses import dataclass, replace

import numpy as np

from ..conv.autotune import TUNER
from ..conv.function import keeps_state
from ..conv.geometry import make_geometry
from ..conv.registry import require
from ..conv.winograd import Winograd, tile_counts
from ..intmath import block_sizes
from ..layers import (
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Flatten,
    LocalResponseNorm,
    MaxPool2d,
)
from .costs import elements
from .instrument import leaf_modules
from .model_costs import count_model

# state arrays per parameter: momentum's velocity, AdaGrad's sum of squares, RMSProp's mean
# square, Adam's two moments (Adam's step count is a number, not an array)
STATE_ARRAYS = {"sgd": 0, "momentum": 1, "nesterov": 1, "adagrad": 1, "rmsprop": 1, "adam": 2}
ZERO_STAGES = (0, 1, 2, 3)
KINDS = ("params", "grads", "state", "activations")
NCHW_OUTPUT = ("direct", "fft")  # convolutions that write their output row-major


def state_arrays(optimizer):
    """K, the state arrays an update rule keeps per parameter."""
    if optimizer not in STATE_ARRAYS:
        raise ValueError(
            f"unknown optimizer {optimizer!r}: choose one of {', '.join(STATE_ARRAYS)}"
        )
    return STATE_ARRAYS[optimizer]


@dataclass
class Memory:
    """One rank's bytes: ``activations`` are held between forward and backward, ``recomputed``
    the largest recomputed segment's during backward (0 without recomputation)."""

    params: int = 0
    grads: int = 0
    state: int = 0
    activations: int = 0
    recomputed: int = 0

    @property
    def total(self):
        return self.params + self.grads + self.state + self.activations + self.recomputed


def zero_share(buckets, ranks, rank):
    """s_r: the numbers rank ``rank`` of ``ranks`` keeps of buckets of ``buckets`` numbers,
    each cut into blocks whose sizes differ by at most one (the first ones larger)."""
    return sum(block_sizes(size, ranks)[rank] for size in buckets)


def model_state(params, k, itemsize, zero=0, share=0, largest=0):
    """``Memory`` of weights, gradients and state of ``params`` numbers with ``k`` state arrays
    each, replicated (``zero`` 0) or under ZeRO's stage ``zero`` with this rank's ``share``
    (``zero_share``; ``largest``: the largest layer's parameters, which stage 3 gathers)."""
    if zero not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage {zero!r}: choose one of {ZERO_STAGES}")
    share = share if zero else params
    weights = share + largest if zero == 3 else params
    grads = share if zero >= 2 else params
    return Memory(weights * itemsize, grads * itemsize, k * share * itemsize)


@dataclass
class LayerActivations:
    """What one layer's forward leaves for backward: its output's ``buffer`` (no new bytes when
    it is a ``view`` of the input), ``output`` bytes of it the output's own, and the ``saved``
    arrays besides."""

    name: str
    kind: str
    output: int
    view: bool
    saved: int
    channels: int = 1  # of the output: what tensor parallelism splits
    bias: bool = False  # the layer adds a bias
    graph: bool = True  # False: no parameter before it nor its own, so no graph node
    padding: int = 0  # bytes of the output's buffer beyond the output (Winograd's tiles)

    @property
    def buffer(self):
        return self.output + self.padding

    @property
    def held(self):
        return (0 if self.view else self.buffer) + self.saved


def layer_activations(model, input_shape, batch, device="cpu"):
    """``LayerActivations`` of each leaf layer (and residual block's add) of ``model`` training
    on a batch of ``batch`` samples of ``input_shape`` (the shapes from ``count_model``'s
    pass, nothing computed)."""
    costs = count_model(model, input_shape, batch)
    modules = dict(model.named_modules()) | dict(leaf_modules(model))  # a block: its add
    dtype = next((p.dtype for p in model.parameters()), np.dtype("float32"))
    row_major, layers = True, []
    for cost in costs.layers:
        module = modules[cost.name.partition("#")[0]]
        output = elements(cost.output_shape) * dtype.itemsize
        graph = cost.input_grad or any(True for _ in module.parameters())
        view, saved, padding = False, 0, 0
        if isinstance(module, Conv2d):
            saved, padding, row_major = _conv_state(module, cost, dtype, device)
        elif isinstance(module, Flatten):
            view, row_major = row_major, True
        elif isinstance(module, MaxPool2d):
            saved = elements(cost.output_shape)
        elif isinstance(module, LocalResponseNorm):
            saved = 2 * elements(cost.input_shape) * dtype.itemsize
        elif isinstance(module, Dropout):
            view = module.p == 0  # the identity
            saved = 0 if view else elements(cost.input_shape) * dtype.itemsize
        elif isinstance(module, (BatchNorm1d, BatchNorm2d)):
            saved = (elements(cost.input_shape) + cost.input_shape[1]) * dtype.itemsize
        if not graph:  # no parameter before it and none of its own: a plain array, no graph
            view, saved = True, 0
        bias = getattr(module, "bias", None) is not None
        channels = cost.output_shape[1]
        layers.append(
            LayerActivations(
                cost.name, cost.kind, output, view, saved, channels, bias, graph, padding
            )
        )
    return layers


def _conv_state(module, cost, dtype, device):
    """(bytes of the state the forward keeps for backward, of the output's buffer beyond the
    output, whether the output is row-major). Winograd writes whole m x m tiles:
    N (m ceil(H'/m)) (m ceil(W'/m)) K numbers, of which the output is a view."""
    geom = make_geometry(
        cost.input_shape,
        module.weight.shape,
        module.stride,
        module.padding,
        module.dilation,
        module.groups,
    )

    def algorithm(pass_):
        if module.algo != "auto":
            return require(module.algo, geom)
        return TUNER.rule_pick(geom, dtype, device, pass_)

    impl = algorithm("forward")
    kept = keeps_state(impl, geom, dtype, algorithm, cost.input_grad, True)
    saved = impl.saved_bytes(geom.per_group(), dtype) * geom.groups if kept else 0
    padding = 0
    if isinstance(impl, Winograd) and geom.groups == 1:
        rows, columns = tile_counts(geom.out_h, geom.out_w, impl.m)
        tiles = geom.batch * impl.m * rows * impl.m * columns * geom.out_channels
        padding = tiles - elements(geom.output_shape)
    return saved, padding * dtype.itemsize, impl.name in NCHW_OUTPUT


def activation_bytes(layers, segments=None):
    """(held, recomputed): the bytes ``layers`` (``LayerActivations``) keep between forward and
    backward, and (with ``segments``, the ``(start, stop)`` of each recomputed segment) the
    largest segment's, rebuilt in backward. Recomputed, a segment keeps its input (the model's
    batch excepted) and the model its output."""
    if not segments:
        return sum(layer.held for layer in layers), 0
    inputs = sum(layers[start - 1].buffer for start, _ in segments if start > 0)
    largest = max(sum(layer.held for layer in layers[a:b]) for a, b in segments)
    return inputs + layers[-1].buffer, largest


def peak_in_flight(program, chunk_bytes):
    """The most bytes of activations a rank's pipeline ``program`` (instructions with ``op``
    and ``chunk``) keeps at once: a forward of chunk c adds ``chunk_bytes[c]``, its backward
    frees them."""
    live, peak = 0, 0
    for instruction in program:
        if instruction.op == "forward":
            live += chunk_bytes[instruction.chunk]
            peak = max(peak, live)
        elif instruction.op == "backward":
            live -= chunk_bytes[instruction.chunk]
    return peak


def split_activations(layers, plan, tp, rank, batch):
    """``layers`` as rank ``rank`` of a tensor-parallel group of ``tp`` holds them under
    ``plan`` (one word per layer, ``dist.tensor.placement``'s). A split activation is the
    rank's block of its channels or features (``batch``: of the samples), and a convolution's
    kept state follows its input. A ``row`` or ``input`` layer keeps its partial output, the
    sum over the group (a row-major copy: a flatten after it is a view) and, with a bias,
    their sum plus the bias; a ``+gather`` layer (and the last ``batch`` one) its block and
    the gathered whole."""
    share, summed, result = 1.0, False, []
    words = [word.partition("+") for word in plan]
    for index, (layer, (kind, _, gather)) in enumerate(zip(layers, words, strict=True)):
        before, copies = share, 1
        if kind == "batch":  # its input a block of the batch too
            before = share = block_sizes(batch, tp)[rank] / batch
            summed = False
            gather = index + 1 == len(words) or words[index + 1][0] != "batch"
        elif kind in ("column", "filter", "group"):
            share, summed = block_sizes(layer.channels, tp)[rank] / layer.channels, False
        elif kind in ("row", "input"):
            share, summed, copies = 1.0, True, 2 + layer.bias
        saved = layer.saved * (before if layer.kind == "Conv2d" else share)
        view = layer.view or (layer.kind == "Flatten" and summed)
        output = 0 if view else layer.buffer * share + layer.output * (copies - 1)
        if gather:
            output, share = output + layer.output * layer.graph, 1.0
        result.append(
            replace(layer, output=round(output), view=False, saved=round(saved), padding=0)
        )
    return result
