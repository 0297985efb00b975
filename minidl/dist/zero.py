"""ZeRO (Rajbhandari et al. 2020): synchronous data parallelism whose ranks shard what plain
replicas repeat: the optimizer state (stage 1), the averaged gradients too (stage 2), and the
parameters too (stage 3).

The parameters form one flat vector, last first (the order backward makes their gradients),
cut into buckets of at most ``bucket_mb`` (``bucket_runs``); each bucket is cut into n
blocks whose sizes differ by at most one, block r rank r's (``_blocks``). A step reduce-scatters
each bucket's gradients as it is complete, g_r = (1/n) sum_i g_i[block r], applies the update
rule to this rank's blocks, then stages 1 and 2 all-gather the new weights; stage 3 keeps its
blocks only and gathers a layer's weights when the layer runs (``zero_layers``). With P
parameters, K state numbers per parameter (momentum 1, Adam 2) and s = P / n (to one number
per bucket), a rank holds

    stage 1   P weights                    P gradients (until the step)    K s state
    stage 2   P weights                    s + one bucket's gradients      K s state
    stage 3   s + one layer's weights      s + one bucket's gradients      K s state

where a ``Linear`` larger than a bucket counts as tiles of a bucket each (``TiledLinear``).
Stage 3 moves 3P a step instead of 2P: each layer's weights are gathered for its forward and
again for its backward, and the gradients reduce-scattered (§7.2.2).
"""

import math

import numpy as np

from minidl.autograd import no_grad
from minidl.backend import empty, get_array_module
from minidl.intmath import block_sizes
from minidl.layers import Parameter

from .data_parallel import NonFiniteGradientError, ReplicatedOptimizer, _finite, bucket_runs
from .zero_layers import release, tile_rows, wrap_layers


def _blocks(start, stop, n):
    """``[start, stop)`` cut into n contiguous blocks, sizes differing by at most one (the first
    ones longer): each rank's ``(lo, hi)``."""
    edges = np.cumsum([start, *block_sizes(stop - start, n)]).tolist()
    return list(zip(edges[:-1], edges[1:]))


def _overlaps(start, stop, blocks):
    """How many elements of ``[start, stop)`` fall in each of ``blocks``."""
    return [max(0, min(stop, hi) - max(start, lo)) for lo, hi in blocks]


class ZeroOptimizer(ReplicatedOptimizer):
    """``optimizer`` over ``comm``'s ranks with ZeRO stage ``stage`` (the module doc).

    The optimizer is changed in place to update this rank's blocks (a ``Parameter`` per
    bucket), so an LR schedule driving it keeps working; ``state_dict()`` (collective) and
    ``load_state_dict`` speak the one-process layout. Every update rule works (they are
    element-wise); clipping by the global norm does not, and is refused. Stages 1 and 2 make
    every parameter a view of one flat weight vector. ``model``, the model whose layers hold
    the parameters (stage 3 needs it): its layers run through ``zero_layers`` (at stage 2,
    only the ``Linear`` layers larger than a bucket, in tiles); at stage 3 a parameter holds
    an empty array between uses.
    """

    def __init__(self, optimizer, comm, stage=1, allreduce="auto", bucket_mb=4, model=None):
        if stage not in (1, 2, 3):
            raise ValueError(f"ZeroOptimizer: stage {stage!r} must be 1, 2 or 3")
        if getattr(optimizer, "clip_grad_norm", None) is not None:
            raise ValueError(
                "ZeroOptimizer: clip_grad_norm needs the whole gradient's norm, which no rank "
                "holds; clip without ZeRO"
            )
        if stage == 3 and model is None:
            raise ValueError(
                "ZeroOptimizer: stage 3 gathers each layer's parameters when the layer runs; "
                "pass model= (the model whose layers hold the optimizer's parameters)"
            )
        super().__init__(optimizer, comm, allreduce, model)
        self.stage, self.full = stage, list(optimizer.params)
        self.stats.update(bytes_gathered=0)
        bucket_bytes = int(bucket_mb * 2**20)
        sizes, dtypes = [p.data.nbytes for p in self.full], [p.dtype for p in self.full]
        runs = bucket_runs(sizes, bucket_bytes, dtypes)
        self.runs = [[self.full[i] for i in run] for run in runs]
        self.where, self.spans, offset = {}, [], 0  # id(p) -> (bucket, flat offset, shape)
        for k, run in enumerate(self.runs):
            start = offset
            for p in run:
                self.where[id(p)], offset = (k, offset, p.shape), offset + p.size
            self.spans.append((start, offset))
        self.blocks = [_blocks(a, b, comm.size) for a, b in self.spans]
        self.whole = True  # whether the model's parameters hold their values (stage 3: not)
        self.tiles = {}  # id(weight) -> (start, stop) rows of each tile (``TiledLinear``)
        if stage < 3:
            self.weights = get_array_module(self.full[0].data).empty(offset, self.full[0].dtype)
            with no_grad():
                for p in self.full:  # every parameter becomes a view of the flat weights
                    start, stop = self._span(p)
                    self.weights[start:stop] = p.data.reshape(-1)
                    p.data = self.weights[start:stop].reshape(p.shape)
            mine = [self.weights[lo:hi] for lo, hi in self._mine()]
        else:
            mine = [self._own_block(k, [p.data for p in run]) for k, run in enumerate(self.runs)]
            self._nothing = get_array_module(mine[0]).empty(0, dtype=mine[0].dtype)
        self.pieces = [Parameter(block) for block in mine]
        optimizer.params = self.pieces
        optimizer.state = [{} for _ in self.pieces]
        self.layers = []  # (layer, its parameters) that run through zero_layers
        if model is not None and stage >= 2:
            self.tiles = tile_rows(model, self.where, bucket_bytes)
            self.layers = wrap_layers(self, model)
        self.release_model()
        self._reduced = [False] * len(self.runs)
        self._ready = [set() for _ in self.runs]
        self._log, self._last_log = [], None
        if stage >= 2:
            for p in self.full:
                if id(p) not in self.tiles:  # a tiled weight's tiles are reduced as made
                    p.register_post_accumulate_grad_hook(self._grad_ready)

    # ---------------------------------------------------------------- layout
    def _span(self, p):
        """Where parameter ``p`` lies in the flat vector: ``(start, stop)``."""
        _, start, shape = self.where[id(p)]
        return start, start + math.prod(shape)

    def _mine(self):
        """This rank's ``(lo, hi)`` in each bucket."""
        return [blocks[self.comm.rank] for blocks in self.blocks]

    @property
    def shard_size(self):
        """The parameters this rank updates (and keeps optimizer state for)."""
        return sum(hi - lo for lo, hi in self._mine())

    def _own_block(self, k, values):
        """This rank's block of bucket ``k``, cut from ``values``: the whole arrays (weights or
        a state entry) of the bucket's parameters, in order."""
        lo, hi = self.blocks[k][self.comm.rank]
        xp = get_array_module(self.full[0].data)
        block = xp.empty(hi - lo, dtype=self.full[0].dtype)
        for p, value in zip(self.runs[k], values, strict=True):
            start, stop = self._span(p)
            a, b = max(start, lo), min(stop, hi)
            if b > a:
                block[a - lo : b - lo] = xp.asarray(value).reshape(-1)[a - start : b - start]
        return block

    def _gathered(self, p, a, b, blocks):
        """Elements ``[a, b)`` of parameter ``p``'s flat array, from every rank's block of them
        (``blocks[k]``: this rank's block of bucket k, of the weights or of a state entry), as
        a new flat array; collective."""
        k, offset = self.where[id(p)][:2]
        (lo, hi), start, stop = self.blocks[k][self.comm.rank], offset + a, offset + b
        xp = get_array_module(blocks[k])
        whole = empty(stop - start, blocks[k].dtype, xp, op="ZeRO's gathered parameter")
        first, last = max(start, lo), min(stop, hi)  # what this rank holds of them
        if last > first:
            whole[first - start : last - start] = blocks[k][first - lo : last - lo]
        self.comm.allgatherv(whole, _overlaps(start, stop, self.blocks[k]))
        return whole

    def whole_array(self, p, blocks):
        """Parameter ``p``'s whole array (``_gathered``), in its shape."""
        start, stop = self._span(p)
        return self._gathered(p, 0, stop - start, blocks).reshape(self.where[id(p)][2])

    def weights_of(self, p, a, b):
        """Stage 3: the weights ``[a, b)`` of ``p``'s flat array, gathered for a layer to use and
        drop (collective; logged for ``_join``)."""
        self._log.append(("gather", p, a, b))
        gathered = self._gathered(p, a, b, [piece.data for piece in self.pieces])
        self.stats["bytes_gathered"] += gathered.nbytes
        return gathered

    def gather_model(self):
        """Stage 3: every parameter whole on every rank (collective) until ``release_model`` or
        the next step, so that evaluation and a checkpoint read the model without gathering
        layer by layer (``WholeModelBetweenEpochs``); P weights on each rank meanwhile."""
        if not self.whole:
            weights = [piece.data for piece in self.pieces]
            for _, params in self.layers:
                for p in params:
                    p.data = self.whole_array(p, weights)
            self.whole = True

    def release_model(self):
        """Stage 3: the parameters hold nothing again (their values live in the blocks)."""
        if self.stage == 3:
            for _, params in self.layers:
                release(self, params)
            self.whole = False

    # ------------------------------------------------------------------ step
    def zero_grad(self):
        for p in self.full:
            p.grad = None
        self._log = []

    def _grad_ready(self, p):
        """Stages 2 and 3: reduce-scatter each complete bucket, in order, as backward fills it."""
        k = self.where[id(p)][0]
        self._reduced[k] = False  # a gradient accumulated after the bucket was reduced: again
        self._ready[k].add(id(p))
        first = self._reduced.index(False) if False in self._reduced else len(self.runs)
        while first < len(self.runs) and len(self._ready[first]) == len(self.runs[first]):
            self._reduce(first)
            first += 1

    def _reduce(self, k):
        """Reduce-scatter bucket ``k``'s weighted gradients (``_scatter_add``) and drop them. A
        bucket of one parameter is sent from that gradient itself, a longer one from a copy in
        a pooled buffer."""
        (start, stop), run, piece = self.spans[k], self.runs[k], self.pieces[k]
        xp = get_array_module(piece.data)
        if len(run) == 1 and run[0].grad is not None:
            send = run[0].grad.reshape(-1)
            if self._weight != 1.0:
                send *= self._weight
        else:
            send = empty(stop - start, piece.dtype, xp, op="ZeRO's gradient bucket")
            for p in run:
                a, b = self._span(p)
                if p.grad is None:  # unused in this step, or an empty local batch: contributes 0
                    send[a - start : b - start] = 0
                else:
                    xp.multiply(p.grad.reshape(-1), self._weight, out=send[a - start : b - start])
        for p in run:
            p.grad = None
        self._scatter_add(k, start, stop, send)

    def reduce_rows(self, p, r0, r1, grad):
        """The gradient of rows ``r0..r1-1`` of weight ``p`` (a tile's, this rank's: weighted
        here) reduce-scattered to their owners (``_scatter_add``)."""
        k, start, shape = self.where[id(p)]
        if self._weight != 1.0:
            grad *= self._weight
        row = math.prod(shape[1:])
        self._scatter_add(k, start + r0 * row, start + r1 * row, grad.reshape(-1))

    def _scatter_add(self, k, start, stop, send):
        """Reduce-scatter ``send`` (elements ``[start, stop)`` of bucket ``k``, this rank's) and
        add this rank's share of the mean to its piece's gradient; a bucket reduced to its end
        is done for the step (logged for ``_join``). Stage 1 reduces in place: its share stays
        in the memory of the whole gradient, which stage 1 holds until the step anyway."""
        self._log.append(("reduce", k, start, stop))
        counts = _overlaps(start, stop, self.blocks[k])
        piece, (lo, _) = self.pieces[k], self.blocks[k][self.comm.rank]
        xp = get_array_module(piece.data)
        if self.stage == 1:
            part = self.comm.reduce_scatter(send, counts, op="mean")
        else:
            part = empty(counts[self.comm.rank], piece.dtype, xp, op="ZeRO's gradient block")
            self.comm.reduce_scatter(send, counts, part, op="mean")
        if piece.grad is None and part.size == piece.size:
            piece.grad = part
        else:
            if piece.grad is None:
                piece.grad = xp.zeros(piece.shape, dtype=piece.dtype)
            at = max(start, lo) - lo
            piece.grad[at : at + part.size] += part
        self.stats["bytes_reduced"] += send.nbytes
        if stop == self.spans[k][1]:
            self._reduced[k], self._ready[k] = True, set()

    def _join(self):
        """Take part, without samples, in the step the other ranks run: the gathers and
        reduce-scatters of this rank's last step, in its order, with zero gradients. A rank
        whose share of a batch is empty (an uneven last batch) runs no forward, while stage
        3's gathers and the tiles' reduce-scatters happen inside the others' forward and
        backward."""
        if self._last_log is None:
            raise ValueError(
                f"ZeroOptimizer: rank {self.comm.rank} has no sample in its first step, so it "
                "cannot know which layers the other ranks gather and reduce; give every rank a "
                "sample in the first step"
            )
        xp = get_array_module(self.pieces[0].data)
        for kind, *what in self._last_log:
            if kind == "gather":  # gathered and dropped, as a forward or backward does
                self.weights_of(*what)
            else:
                k, start, stop = what
                self._scatter_add(k, start, stop, xp.zeros(stop - start, self.pieces[k].dtype))

    def step(self):
        """Reduce-scatter what backward has not, check the gradient finite on every rank, update
        this rank's blocks; stages 1 and 2 then all-gather the weights."""
        if self.layers and not self._log:  # no forward here: join the others' collectives
            self._join()
        for k in range(len(self.runs)):
            if not self._reduced[k]:
                self._reduce(k)
        finite = all(_finite(piece.grad) for piece in self.pieces)
        if self.comm.allreduce(np.array([0.0 if finite else 1.0]), op="sum")[0]:
            self._clear()
            raise NonFiniteGradientError(
                "the gradient averaged over all ranks is not finite (NaN or inf); "
                "no update was applied"
            )
        self.optimizer.step()
        if self.stage < 3:
            for (a, b), blocks in zip(self.spans, self.blocks):
                self.comm.allgatherv(self.weights[a:b], _overlaps(a, b, blocks))
            self.stats["bytes_gathered"] += self.weights.nbytes
        self.release_model()  # stage 3: whole copies gathered before the update are stale
        self.stats["steps"] += 1
        self._clear()

    def _clear(self):
        self._weight = 1.0
        for piece in self.pieces:
            piece.grad = None
        self._reduced = [False] * len(self.runs)
        if self._log:
            self._last_log = self._log
        self._log = []

    # ----------------------------------------------------------------- state
    def state_dict(self):
        """The one-process optimizer's state dict, each parameter's state gathered from the
        blocks (collective)."""
        states = self.optimizer.state
        serial = [{} for _ in self.full]
        for key, value in sorted(states[0].items()):
            if getattr(value, "ndim", 0) != 1:  # a number (Adam's step count): every block's
                for state in serial:
                    state[key] = value
                continue
            blocks = [state[key] for state in states]
            for p, state in zip(self.full, serial):
                state[key] = self.whole_array(p, blocks)
        return {"hyper": self.optimizer.state_dict()["hyper"], "state": serial}

    def load_state_dict(self, state_dict):
        """This rank's blocks of a one-process optimizer's ``state_dict``."""
        states = state_dict["state"]
        if len(states) != len(self.full):
            raise ValueError(
                f"ZeroOptimizer.load_state_dict: the state holds {len(states)} parameters, the "
                f"model has {len(self.full)}"
            )
        index = {id(p): i for i, p in enumerate(self.full)}
        pieces = [{} for _ in self.pieces]
        for key, value in states[0].items() if states else ():
            for k, (run, piece) in enumerate(zip(self.runs, pieces)):
                if np.ndim(value) == 0:
                    piece[key] = value
                else:
                    piece[key] = self._own_block(k, [states[index[id(p)]][key] for p in run])
        self.optimizer.load_state_dict({"hyper": state_dict["hyper"], "state": pieces})
