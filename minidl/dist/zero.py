"""ZeRO (Rajbhandari et al. 2020): synchronous data parallelism whose ranks shard what plain
replicas repeat: the optimizer state (stage 1), the averaged gradients too (stage 2), and the
parameters too (stage 3).

The parameters form one flat vector, last first (the order backward makes their gradients),
cut into buckets of at most ``bucket_mb`` (``make_buckets``' runs); each bucket is cut into n
blocks whose sizes differ by at most one, block r rank r's (``_blocks``). A step reduce-scatters
each bucket's gradients as it is complete, g_r = (1/n) sum_i g_i[block r], applies the update
rule to this rank's blocks, then stages 1 and 2 all-gather the new weights; stage 3 keeps its
blocks only and gathers a layer's weights when the layer runs. With P parameters, K state
numbers per parameter (momentum 1, Adam 2) and s = P / n (to one number per bucket), a rank
holds

    stage 1   P weights                    P gradients (until the step)    K s state
    stage 2   P weights                    s + one bucket's gradients      K s state
    stage 3   s + one layer's weights      s + one bucket's gradients      K s state

Stage 3 moves 3P a step instead of 2P: each layer's weights are gathered for its forward and
again for its backward, and the gradients reduce-scattered (§7.2.2).
"""

import functools
import math

import numpy as np

from minidl.autograd import no_grad
from minidl.backend import empty, get_array_module
from minidl.intmath import block_sizes
from minidl.layers import Parameter, leaves
from minidl.recompute import checkpoint
from minidl.train.callbacks import Callback

from .data_parallel import NonFiniteGradientError, ReplicatedOptimizer, _finite, make_buckets


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
    every parameter a view of one flat weight vector. Stage 3 needs ``model``: each of its
    leaf layers that holds parameters gathers them when it runs (``_forward``), and between
    uses a parameter holds an empty array.
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
        self.runs = [bucket.params for bucket in make_buckets(self.full, int(bucket_mb * 2**20))]
        self.where, self.spans, offset = {}, [], 0  # id(p) -> (bucket, flat offset, shape)
        for k, run in enumerate(self.runs):
            start = offset
            for p in run:
                self.where[id(p)], offset = (k, offset, p.shape), offset + p.size
            self.spans.append((start, offset))
        self.blocks = [_blocks(a, b, comm.size) for a, b in self.spans]
        self.layers, self.whole = [], True  # stage 3: each layer's parameters; held whole?
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
            self.layers = self._wrap_layers(model)
            self.release_model()
        self.pieces = [Parameter(block) for block in mine]
        optimizer.params = self.pieces
        optimizer.state = [{} for _ in self.pieces]
        self._reduced = [False] * len(self.runs)
        self._ready = [set() for _ in self.runs]
        self._log, self._last_log = [], self._chain_log()
        if stage >= 2:
            for p in self.full:
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

    def _whole(self, p, blocks):
        """Parameter ``p``'s whole array from every rank's block of it (``blocks[k]``: this
        rank's block of bucket k, of the weights or of a state entry); collective."""
        k, shape = self.where[id(p)][0], self.where[id(p)][2]
        (start, stop), (lo, hi) = self._span(p), self.blocks[k][self.comm.rank]
        xp = get_array_module(blocks[k])
        whole = empty(stop - start, blocks[k].dtype, xp, op="ZeRO's gathered parameter")
        a, b = max(start, lo), min(stop, hi)
        if b > a:
            whole[a - start : b - start] = blocks[k][a - lo : b - lo]
        self.comm.allgatherv(whole, _overlaps(start, stop, self.blocks[k]))
        return whole.reshape(shape)

    # --------------------------------------------------------------- stage 3
    def _wrap_layers(self, model):
        """Put ``_forward`` in front of the forward of each leaf layer of ``model`` that holds
        parameters (an instance attribute, as ``perf.instrument`` times layers); returns each
        such layer's parameters, in model order."""
        layers = []
        for _, layer in leaves(model):
            params = [p for p in layer._parameters.values() if id(p) in self.where]
            if params:
                forward = functools.partial(self._forward, params, layer.forward)
                object.__setattr__(layer, "forward", forward)
                layers.append(params)
        held = {id(p) for params in layers for p in params}
        for name, p in zip(self._param_names(self.full), self.full):
            if id(p) not in held:
                raise ValueError(
                    f"ZeroOptimizer: stage 3 gathers parameters layer by layer, but {name} is in "
                    "no leaf layer of the model; pass the model that holds it, or use stage 1 or 2"
                )
        return layers

    def _forward(self, params, forward, x):
        """A layer's ``forward`` on its gathered ``params``, which it does not keep: without a
        graph, and again in backward (``checkpoint``, which replays the random draws), where
        the gradients reach their owners (``_grad_ready``).

        Keeping the graph instead would keep every gathered weight alive until backward (a
        ``Linear`` saves W for dX = dY W), so no layer's copy could be freed; recomputing costs
        one more forward of each layer with parameters a step, and keeps its input only."""
        if self.whole:
            return forward(x)
        return checkpoint(functools.partial(self._run_gathered, params, forward), x)

    def _run_gathered(self, params, forward, x):
        """``forward(x)`` with ``params`` gathered, then released (logged for ``_join``)."""
        self._log.append(("gather", params))
        self._gather(params)
        try:
            return forward(x)
        finally:
            self._release(params)

    def _gather(self, params):
        weights = [piece.data for piece in self.pieces]
        for p in params:
            p.data = self._whole(p, weights)
            self.stats["bytes_gathered"] += p.data.nbytes

    def _release(self, params):
        for p in params:
            p.data = self._nothing

    def gather_model(self):
        """Stage 3: every parameter whole on every rank (collective) until ``release_model`` or
        the next step, so that evaluation and a checkpoint read the model without gathering
        layer by layer (``WholeModelBetweenEpochs``); P weights on each rank meanwhile."""
        if not self.whole:
            for params in self.layers:
                self._gather(params)
            self.whole = True

    def release_model(self):
        """Stage 3: the parameters hold nothing again (their values live in the blocks)."""
        for params in self.layers:
            self._release(params)
        self.whole = self.stage < 3

    def _chain_log(self):
        """A step's collectives when the layers run as a chain: each one's forward in model order,
        then each backward in reverse, its gradients ready as it ends. What ``_join`` repeats
        before this rank has run a step of its own."""
        backward = [("gather", params) for params in reversed(self.layers)]
        ready = [[("ready", p) for p in params] for params in reversed(self.layers)]
        chain = [("gather", params) for params in self.layers]
        return chain + [entry for b, r in zip(backward, ready) for entry in (b, *r)]

    def _join(self, log):
        """Take part, without samples, in the step the other ranks run: ``log``'s gathers and
        reduce-scatters (a step's, in its order), with zero gradients. A rank whose share of a
        batch is empty (an uneven last batch) runs no forward, but stage 3's gathers need it."""
        for kind, what in log:
            if kind == "gather":  # gathered and released, as a forward or backward would
                self._run_gathered(what, lambda _: None, None)
            else:
                self._grad_ready(what)

    # ------------------------------------------------------------------ step
    def zero_grad(self):
        for p in self.full:
            p.grad = None
        self._log = []

    def _grad_ready(self, p):
        """Stages 2 and 3: reduce-scatter each complete bucket, in order, as backward fills it."""
        self._log.append(("ready", p))
        k = self.where[id(p)][0]
        self._reduced[k] = False  # a gradient accumulated after the bucket was reduced: again
        self._ready[k].add(id(p))
        first = self._reduced.index(False) if False in self._reduced else len(self.runs)
        while first < len(self.runs) and len(self._ready[first]) == len(self.runs[first]):
            self._reduce(first)
            first += 1

    def _reduce(self, k):
        """Reduce-scatter bucket ``k``'s weighted gradients, add this rank's block of the mean to
        its piece's gradient, and drop the bucket's local gradients. A bucket of one parameter
        is sent from that gradient itself, a longer one from a copy in a pooled buffer."""
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
        part = empty(piece.size, piece.dtype, xp, op="ZeRO's gradient block")
        self.comm.reduce_scatter(send, _overlaps(start, stop, self.blocks[k]), part, op="mean")
        piece.grad = part if piece.grad is None else piece.grad + part
        self.stats["bytes_reduced"] += send.nbytes
        self._reduced[k], self._ready[k] = True, set()

    def step(self):
        """Reduce-scatter what backward has not, check the gradient finite on every rank, update
        this rank's blocks; stages 1 and 2 then all-gather the weights."""
        if self.stage == 3 and not self._log:  # no forward on this rank: join the others'
            self._join(self._last_log)
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
        self.release_model()  # stage 3: whole copies gathered before the update are stale
        self.stats["steps"] += 1
        self._clear()

    def _clear(self):
        self._weight = 1.0
        for piece in self.pieces:
            piece.grad = None
        self._reduced = [False] * len(self.runs)
        self._last_log, self._log = self._log or self._last_log, []

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
                state[key] = self._whole(p, blocks)
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


class Zero3Placement:
    """What evaluation and the checkpoint see of a model trained with ZeRO stage 3 (the
    protocol of ``loop.Training.placement``): ``module`` (the model) evaluated on ``replicas``'
    shares of the test set (whole between epochs: ``WholeModelBetweenEpochs``); the serial
    model's state (``model_state``) and the optimizer's (``optimizer_state``) streamed to rank
    0, each parameter gathered in turn when the model is not whole (collective; None on the
    other ranks); ``scatter_state``, what ``ZeroOptimizer.load_state_dict`` takes (the
    one-process layout: it cuts this rank's blocks itself)."""

    def __init__(self, zero):
        self.zero, self.module, self.replicas = zero, zero.model, zero.comm
        self.evaluated = self.module

    def model_state(self):
        root, zero = self.replicas.rank == 0, self.zero
        weights = [piece.data for piece in zero.pieces]
        for name, p in self.module.named_parameters():
            whole = p.data if zero.whole or id(p) not in zero.where else zero._whole(p, weights)
            yield name, whole if root else None
        for name, b in self.module.named_buffers():
            yield name, b.data if root else None

    def optimizer_state(self, state_dict):
        root = self.replicas.rank == 0
        return {
            "hyper": state_dict["hyper"],
            "state": (state if root else None for state in state_dict["state"]),
        }

    def scatter_state(self, state_dict):
        return state_dict
