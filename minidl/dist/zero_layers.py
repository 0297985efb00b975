"""How a model's layers run under ``ZeroOptimizer`` (Rajbhandari et al. 2020), and what
evaluation and the checkpoint see of a stage-3 model.

Stage 3 (``gathered_forward``): a leaf layer that holds parameters runs its forward on them
gathered, without a graph, and drops them; backward gathers them again and runs the forward
again with a graph (``recompute.checkpoint``, which replays the random draws), then the
gradients reach their owners as buckets complete. Keeping the graph instead would keep
every gathered weight alive until backward (a ``Linear`` saves W for dX = dY W), so no copy
could be freed; recomputing costs one more forward of each such layer a step.

Tiles (stages 2 and 3; memory-centric tiling, Rajbhandari et al. 2021, ZeRO-Infinity
§5.1.3): a ``Linear`` whose weight is larger than a bucket runs as ``TiledLinear``, a tile
of rows at a time, each tile's gradient reduce-scattered as soon as backward makes it, so
that no rank holds that whole gradient (nor, at stage 3, that whole weight): the largest
gathered layer is otherwise the transient that stage 3 adds (AlexNet's fc6, 62% of its
weights).
"""

import functools
import math

from minidl.autograd import Function
from minidl.backend import empty, get_array_module
from minidl.layers import Linear, leaves
from minidl.recompute import checkpoint
from minidl.train.callbacks import Callback


def tile_rows(model, where, bucket_bytes):
    """``id(weight) -> [(start, stop) rows of each tile]`` for the ``Linear`` layers of
    ``model`` whose weight (one of ``where``'s: the optimizer's) is larger than
    ``bucket_bytes``: as many rows a tile as fit in a bucket."""
    tiles = {}
    for _, layer in leaves(model):
        if isinstance(layer, Linear) and id(layer.weight) in where:
            out, row = layer.weight.shape[0], layer.weight.data[0].nbytes
            if out * row > bucket_bytes:
                step = max(1, bucket_bytes // row)
                tiles[id(layer.weight)] = [(r, min(r + step, out)) for r in range(0, out, step)]
    return tiles


def wrap_layers(zero, model):
    """Put ``zero``'s forward in front of each leaf layer of ``model`` that needs one (an
    instance attribute, as ``perf.instrument`` times layers): ``tiled_forward`` for a tiled
    ``Linear``, ``gathered_forward`` for the others with parameters at stage 3. Returns
    (layer, its parameters) of each."""
    layers = []
    for _, layer in leaves(model):
        params = [p for p in layer._parameters.values() if id(p) in zero.where]
        if id(getattr(layer, "weight", None)) in zero.tiles:
            run = tiled_forward
        elif params and zero.stage == 3:
            run = gathered_forward
        else:
            continue
        forward = functools.partial(run, zero, layer, params, layer.forward)
        object.__setattr__(layer, "forward", forward)
        layers.append((layer, params))
    held = {id(p) for _, params in layers for p in params}
    for name, p in zip(zero._param_names(zero.full), zero.full):
        if id(p) not in held and zero.stage == 3:
            raise ValueError(
                f"ZeroOptimizer: stage 3 gathers parameters layer by layer, but {name} is in "
                "no leaf layer of the model; pass the model that holds it, or use stage 1 or 2"
            )
    return layers


def gather(zero, params):
    """Stage 3: each of ``params`` holds its whole weights (collective)."""
    for p in params:
        shape = zero.where[id(p)][2]
        p.data = zero.weights_of(p, 0, math.prod(shape)).reshape(shape)


def release(zero, params):
    """Stage 3: ``params`` hold nothing (their values live in ``zero``'s blocks)."""
    for p in params:
        p.data = zero._nothing


def gathered_forward(zero, layer, params, forward, x):
    """Stage 3's forward of ``layer`` (``forward``, its own): on its gathered ``params``,
    without a graph, and again in backward (the module doc)."""
    if zero.whole:
        return forward(x)
    return checkpoint(functools.partial(_run_gathered, zero, params, forward), x)


def _run_gathered(zero, params, forward, x):
    gather(zero, params)
    try:
        return forward(x)
    finally:
        release(zero, params)


def tiled_forward(zero, layer, params, forward, x):
    """A ``Linear`` larger than a bucket as ``TiledLinear`` (its bias gathered at stage 3)."""
    if zero.whole and zero.stage == 3:
        return forward(x)
    bias = [layer.bias] if layer.bias is not None else []
    if zero.stage == 3:
        gather(zero, bias)
    try:
        return TiledLinear.apply(x, layer.weight, *bias, zero=zero, weight=layer.weight)
    finally:
        if zero.stage == 3:
            release(zero, bias)


class TiledLinear(Function):
    """y = x W^T + b, W in tiles of rows (the module doc): the rows W_t of each tile (gathered
    at stage 3, a view at stage 2) give rows t of y^T = W x^T; backward takes them again for
    dX = sum_t dY[:, t] W_t and hands each dW_t = dY[:, t]^T x to ``zero.reduce_rows`` as soon
    as it is made. Keeps x, as ``Linear`` does; 2-d inputs."""

    def forward(self, x, _, bias=None, *, zero, weight):
        self.x, self.zero, self.weight = x, zero, weight
        xp = get_array_module(x)
        y_t = empty((zero.where[id(weight)][2][0], x.shape[0]), x.dtype, xp, "tiled linear y")
        for r0, r1 in zero.tiles[id(weight)]:
            xp.matmul(self._rows(r0, r1), x.T, out=y_t[r0:r1])
        y = y_t.T  # column-major, as ``Linear``'s
        if bias is not None:
            y += bias
        return y

    def _rows(self, r0, r1):
        zero, weight = self.zero, self.weight
        if zero.stage < 3:
            return weight.data[r0:r1]
        row = zero.where[id(weight)][2][1]
        return zero.weights_of(weight, r0 * row, r1 * row).reshape(r1 - r0, row)

    def backward(self, g):
        x, xp = self.x, get_array_module(g)
        gx = xp.zeros_like(x) if self.needs_input_grad[0] else None
        for r0, r1 in self.zero.tiles[id(self.weight)]:
            rows = self._rows(r0, r1)
            if gx is not None:
                gx += g[:, r0:r1] @ rows
            gw = empty((r1 - r0, x.shape[1]), g.dtype, xp, "tiled linear dW")
            self.zero.reduce_rows(self.weight, r0, r1, xp.matmul(g[:, r0:r1].T, x, out=gw))
        if len(self.needs_input_grad) == 2:
            return gx, None
        return gx, None, g.sum(axis=0) if self.needs_input_grad[2] else None


class WholeModelBetweenEpochs(Callback):
    """Stage 3 in the epoch loop: the model whole on every rank from the end of an epoch's
    training (``after_epoch``, which every rank reaches) to the end of its evaluation and
    checkpoint. Evaluation then issues no gathers, so the ranks' shares of the test set may
    hold different numbers of batches; it costs the whole weights on each rank meanwhile."""

    def __init__(self, zero):
        self.zero = zero

    def after_epoch(self, epoch, stats):
        self.zero.gather_model()
        return []

    def after_evaluation(self):
        self.zero.release_model()
