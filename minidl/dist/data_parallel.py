"""Synchronous data parallelism: replicas that average their gradients before every update.

Each of n ranks computes the gradient g_i of its shard of the minibatch and all apply
g = (1/n) sum_i g_i, so the replicas stay identical: with local batches of b, minibatch
SGD with batch n*b (Ben-Nun & Hoefler 2019, §5.1, §6.1). ``FlatBuffer`` and
``OptimizerWrapper`` serve ``consistency/`` too. ``ZeroOptimizer`` applies the same
update with the optimizer state (stage 1) and the gradients (stage 2) sharded over the
ranks (ZeRO, Rajbhandari et al. 2020).
"""

import math
import time

import numpy as np

from minidl.autograd import no_grad
from minidl.backend import empty, get_array_module
from minidl.dist.collectives import check_algorithm
from minidl.intmath import block_sizes
from minidl.layers import Parameter


class FlatBuffer:
    """A contiguous vector with one view per parameter (same dtype, in list order): weights
    and gradients travel as one message, whatever the number of tensors."""

    def __init__(self, params):
        if not params:
            raise ValueError("FlatBuffer: got no parameters")
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise ValueError(
                f"FlatBuffer: parameters of several dtypes {sorted(map(str, dtypes))}; "
                "convert the model to one dtype first"
            )
        xp = get_array_module(params[0].data)
        self.params = list(params)
        self.flat = xp.empty(sum(p.size for p in params), dtype=params[0].dtype)
        self.views, offset = [], 0
        for p in params:
            self.views.append(self.flat[offset : offset + p.size].reshape(p.shape))
            offset += p.size

    @property
    def size(self):
        return self.flat.size

    def gather_weights(self):
        """Copy the parameters' values into the vector; returns it."""
        xp = get_array_module(self.flat)
        for p, view in zip(self.params, self.views):
            xp.copyto(view, p.data)
        return self.flat

    def gather_grads(self, weight=1.0):
        """Copy ``weight`` times each gradient into the vector (0 where a gradient is None)."""
        xp = get_array_module(self.flat)
        for p, view in zip(self.params, self.views):
            if p.grad is None:  # unused in this step, or an empty local batch: contributes 0
                view[...] = 0
            elif weight == 1.0:
                xp.copyto(view, p.grad)
            else:
                xp.multiply(p.grad, weight, out=view)
        return self.flat

    def scatter_weights(self, flat=None):
        """Copy ``flat`` (default: the vector itself) into the parameters' values, in place."""
        xp = get_array_module(self.flat)
        if flat is not None and flat is not self.flat:
            xp.copyto(self.flat, flat)
        with no_grad():
            for p, view in zip(self.params, self.views):
                xp.copyto(p.data, view)

    def scatter_grads(self):
        """Make each parameter's gradient its view of the vector."""
        for p, view in zip(self.params, self.views):
            p.grad = view


class OptimizerWrapper:
    """``optimizer``'s ``params``, ``state``, ``lr`` (settable), ``zero_grad`` and state dicts;
    subclasses define ``step()``. The loop, LR schedules and checkpoints then treat a
    distributed optimizer like the one it wraps; the rest (momentum...) is on ``.optimizer``."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    @property
    def params(self):
        return self.optimizer.params

    @property
    def state(self):
        return self.optimizer.state

    @property
    def lr(self):
        return self.optimizer.lr

    @lr.setter
    def lr(self, value):
        self.optimizer.lr = value

    def zero_grad(self):
        self.optimizer.zero_grad()

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self):
        return f"{type(self).__name__}({self.optimizer!r})"


class NonFiniteGradientError(ArithmeticError):
    """The averaged gradient holds NaN or inf: every rank stops before the update (checked
    after the allreduce, on values all ranks hold, so that all decide alike)."""


def _finite(flat):
    """True when no element is NaN or inf (one float64 sum: NaN and inf propagate)."""
    return math.isfinite(float(flat.sum(dtype="float64")))


class ReplicatedOptimizer(OptimizerWrapper):
    """The wrapped ``optimizer`` on identical replicas; subclasses define ``_average_gradients``.

    Construction checks that every rank built the same model and broadcasts parameters,
    buffers and optimizer state from rank 0. ``allreduce``: ``"auto"`` or one of
    ``ALLREDUCE_ALGORITHMS``; ``model``: its buffers (batch-norm statistics) are broadcast
    too, and its parameter names appear in errors. ``stats``: steps, seconds, bytes.
    """

    def __init__(self, optimizer, comm, allreduce="auto", model=None):
        super().__init__(optimizer)
        self.comm, self.algorithm, self.model = comm, check_algorithm(allreduce), model
        self._weight = 1.0
        self.stats = {"steps": 0, "comm_seconds": 0.0, "bytes_reduced": 0}
        self._check_same_model()
        self.broadcast_state()

    def _param_names(self, params):
        if self.model is None:
            return [f"parameter {i}" for i in range(len(params))]
        by_id = {id(p): n for n, p in self.model.named_parameters()}
        return [by_id.get(id(p), f"parameter {i}") for i, p in enumerate(params)]

    def _check_same_model(self):
        """Raise on every rank, naming the first rank whose parameters differ from rank 0's."""
        params = self.optimizer.params
        everyone = self.comm.allgather_object([(tuple(p.shape), str(p.dtype)) for p in params])
        for rank, theirs in enumerate(everyone):
            if theirs == everyone[0]:
                continue
            if len(theirs) != len(everyone[0]):
                detail = f"{len(theirs)} parameters instead of {len(everyone[0])}"
            else:
                i = next(i for i, (a, b) in enumerate(zip(theirs, everyone[0])) if a != b)
                (shape, dtype), (shape0, dtype0) = theirs[i], everyone[0][i]
                detail = (
                    f"{self._param_names(params)[i]} is {shape} {dtype} there but "
                    f"{shape0} {dtype0} on rank 0"
                )
            raise ValueError(
                f"{type(self).__name__}: rank {rank} built a different model: "
                f"{detail}; every rank must build the same model"
            )

    def broadcast_state(self, root=0):
        """Copy parameters, model buffers and optimizer state from ``root`` to all ranks."""
        arrays = [p.data for p in self.optimizer.params]
        if self.model is not None:
            arrays += [b.data for _, b in self.model.named_buffers()]
        for state in self.optimizer.state:
            arrays += [v for _, v in sorted(state.items()) if hasattr(v, "shape")]
        for a in arrays:
            if a.ndim == 0:  # 0-d buffers (counters): bcast a 1-element view
                a = a.reshape(1)
            self.comm.bcast(a, root=root)

    def set_batch_weight(self, local_count, global_count):
        """Weight this rank's next gradient by ``local_count * size / global_count``, so that
        the average over ranks is the exact mean gradient of a global batch whose local
        batches differ (an epoch's last step). Call before ``backward()``."""
        self._weight = local_count * self.comm.size / max(global_count, 1)

    def step(self):
        """Average the gradients over all ranks, check them finite, then apply the update."""
        averaged = self._average_gradients()
        self._weight = 1.0
        if self.comm.size > 1 and not all(_finite(flat) for flat in averaged):
            raise NonFiniteGradientError(
                "the gradient averaged over all ranks is not finite (NaN or inf); "
                "no update was applied"
            )
        self.stats["steps"] += 1
        self.optimizer.step()

    def _average_gradients(self):
        """Make each parameter's gradient the average over ranks of this rank's gradient times
        the batch weight (``set_batch_weight``); return the flat vectors that hold it."""
        raise NotImplementedError(f"{type(self).__name__}._average_gradients")


class Bucket(FlatBuffer):
    """A flat gradient buffer for a run of parameters of one dtype."""

    def __init__(self, index, params):
        super().__init__(params)
        self.index = index
        self.ready = set()
        self.request = None
        self.sent = []  # the gradient arrays copied into ``flat`` at launch


def make_buckets(params, bucket_bytes):
    """Group parameters, last first (the order backward produces their gradients), into runs
    of one dtype of at most ``bucket_bytes`` each."""
    buckets, run, run_bytes = [], [], 0
    for p in reversed(params):
        nbytes = p.size * p.dtype.itemsize
        if run and (run_bytes + nbytes > bucket_bytes or p.dtype != run[0].dtype):
            buckets.append(Bucket(len(buckets), run))
            run, run_bytes = [], 0
        run.append(p)
        run_bytes += nbytes
    if run:
        buckets.append(Bucket(len(buckets), run))
    return buckets


class DistributedOptimizer(ReplicatedOptimizer):
    """Wrap ``optimizer`` so that ``step()`` applies the gradient averaged over ``comm``'s ranks.

    Gradients travel in buckets of ``bucket_mb`` (``make_buckets``); with ``overlap`` a
    bucket's allreduce starts once its last gradient is accumulated, while backward
    computes the earlier layers. Buckets start in index order, so every rank issues the
    same collectives in the same order. ``stats`` also counts the seconds of averaging
    after backward (``exposed_seconds``) and during it (``overlapped_seconds``).
    """

    def __init__(
        self,
        optimizer,
        comm,
        allreduce: str = "auto",
        bucket_mb: float = 4,
        overlap: bool = True,
        model=None,
    ):
        if bucket_mb <= 0:
            raise ValueError(f"DistributedOptimizer: bucket_mb={bucket_mb} must be positive")
        super().__init__(optimizer, comm, allreduce, model)
        self.overlap = overlap
        self.stats.update(exposed_seconds=0.0, overlapped_seconds=0.0)
        self.buckets = make_buckets(optimizer.params, int(bucket_mb * 2**20))
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}
        self._next_launch = 0
        if overlap and comm.size > 1:
            for p in optimizer.params:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def _grad_ready(self, p):
        bucket = self._bucket_of[id(p)]
        bucket.ready.add(id(p))
        if len(bucket.ready) == len(bucket.params):
            self._launch_ready()

    def _launch_ready(self):
        """Start the allreduce of every complete bucket whose predecessors have started."""
        while self._next_launch < len(self.buckets):
            bucket = self.buckets[self._next_launch]
            if len(bucket.ready) < len(bucket.params):
                return
            self._launch(bucket)
            self._next_launch += 1

    def _launch(self, bucket):
        bucket.sent = [p.grad for p in bucket.params]
        bucket.gather_grads(self._weight)
        bucket.request = self.comm.iallreduce(bucket.flat, op="mean", algorithm=self.algorithm)

    def _average_gradients(self):
        if self.comm.size == 1:
            return []
        backward_done = time.perf_counter()
        for bucket in self.buckets:  # buckets no hook completed start now, in order
            bucket.ready.update(id(p) for p in bucket.params)
        self._launch_ready()
        for bucket in self.buckets:
            bucket.request.wait()
            self._record(bucket, backward_done)
            if any(p.grad is not g for p, g in zip(bucket.params, bucket.sent)):
                # another backward accumulated after the early start: reduce the final values
                self._launch(bucket)
                bucket.request.wait()
            bucket.scatter_grads()
            bucket.ready.clear()
            bucket.request = None
        self.stats["exposed_seconds"] += time.perf_counter() - backward_done
        self._next_launch = 0
        return [bucket.flat for bucket in self.buckets]

    def _record(self, bucket, backward_done):
        started, finished = bucket.request.started, bucket.request.finished
        self.stats["comm_seconds"] += finished - started
        self.stats["overlapped_seconds"] += max(0.0, min(finished, backward_done) - started)
        self.stats["bytes_reduced"] += bucket.flat.nbytes

    def overlap_fraction(self):
        """Share of allreduce time that ran while backward was still computing (0..1)."""
        total = self.stats["comm_seconds"]
        return self.stats["overlapped_seconds"] / total if total > 0 else 0.0


def _runs(params, bucket_bytes):
    """``params`` last first (the order backward produces them) in runs of at most
    ``bucket_bytes`` (``make_buckets``'s grouping, without their buffers)."""
    return [bucket.params for bucket in make_buckets(params, bucket_bytes)]


class ZeroOptimizer(ReplicatedOptimizer):
    """Data parallelism with ZeRO (Rajbhandari et al. 2020): each rank keeps and updates the
    optimizer state of its 1/n of the parameters, then the ranks all-gather the weights.

    A step: reduce-scatter of the gradients, g_r = (1/n) sum_i g_i[shard r], bucket by
    bucket, each bucket's local gradients dropped once it is reduced; the update rule on
    shard r only; all-gather of the new weights. With P parameters, K state numbers per
    parameter (momentum 1, Adam 2) and n ranks, a rank holds P weights, K P / n of state,
    and at most P gradients (``stage=1``: reduced in ``step``) or about P / n plus a bucket
    (``stage=2``: each bucket reduced as backward completes it). The optimizer is changed in
    place to update this rank's shard (a ``Parameter`` per bucket viewing its part of one
    flat weight vector, of which every model parameter becomes a view), so an LR schedule
    driving it keeps working; ``state_dict()`` (collective) and ``load_state_dict`` speak
    the one-process layout. Every update rule works (they are element-wise); clipping by
    the global norm does not, and is refused.
    """

    def __init__(self, optimizer, comm, stage=1, allreduce="auto", bucket_mb=4, model=None):
        if stage not in (1, 2):
            raise ValueError(f"ZeroOptimizer: stage {stage!r} must be 1 or 2")
        if getattr(optimizer, "clip_grad_norm", None) is not None:
            raise ValueError(
                "ZeroOptimizer: clip_grad_norm needs the whole gradient's norm, which no rank "
                "holds; clip without ZeRO"
            )
        super().__init__(optimizer, comm, allreduce, model)
        self.stage, self.full = stage, list(optimizer.params)
        xp = get_array_module(self.full[0].data)
        self.runs = _runs(self.full, int(bucket_mb * 2**20))
        self.offsets, self.spans, offset = {}, [], 0
        for run in self.runs:  # the flat order: run by run, each last parameter first
            start = offset
            for p in run:
                self.offsets[id(p)], offset = offset, offset + p.size
            self.spans.append((start, offset))
        self.weights = xp.empty(offset, dtype=self.full[0].dtype)
        with no_grad():
            for p in self.full:  # every parameter becomes a view of the flat weights
                start = self.offsets[id(p)]
                view = self.weights[start : start + p.size].reshape(p.shape)
                view[...] = p.data
                p.data = view
        self.counts = block_sizes(offset, comm.size)
        starts = np.cumsum([0, *self.counts]).tolist()
        self.bounds = list(zip(starts[:-1], starts[1:]))
        self.lo, self.hi = self.bounds[comm.rank]
        self.pieces = {}  # run -> (start, stop, Parameter): this rank's part of the run
        for k, (a, b) in enumerate(self.spans):
            lo, hi = max(a, self.lo), min(b, self.hi)
            if hi > lo:
                self.pieces[k] = (lo, hi, Parameter(self.weights[lo:hi]))
        if not self.pieces:  # fewer parameters than ranks: an empty shard still steps
            self.pieces[None] = (self.lo, self.lo, Parameter(self.weights[self.lo : self.lo]))
        optimizer.params = [piece for _, _, piece in self.pieces.values()]
        optimizer.state = [{} for _ in optimizer.params]
        self._send = xp.empty(max(b - a for a, b in self.spans), dtype=self.weights.dtype)
        self._reduced = [False] * len(self.runs)
        self._ready = [set() for _ in self.runs]
        self._run_of = {id(p): k for k, run in enumerate(self.runs) for p in run}
        if stage == 2:
            for p in self.full:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    @property
    def shard_size(self):
        """The parameters this rank updates (and keeps optimizer state for)."""
        return self.hi - self.lo

    def zero_grad(self):
        for p in self.full:
            p.grad = None

    def _grad_ready(self, p):
        """Stage 2: reduce-scatter each complete run, in order, as backward produces it."""
        k = self._run_of[id(p)]
        self._reduced[k] = False  # a gradient accumulated after the run was reduced: again
        self._ready[k].add(id(p))
        first = self._reduced.index(False) if False in self._reduced else len(self.runs)
        while first < len(self.runs) and len(self._ready[first]) == len(self.runs[first]):
            self._reduce(first)
            first += 1

    def _reduce(self, k):
        """Reduce-scatter run ``k``'s weighted gradients, add this rank's part to its piece's
        gradient, and drop the run's local gradients."""
        start, stop = self.spans[k]
        send, xp = self._send[: stop - start], get_array_module(self._send)
        for p in self.runs[k]:
            view = send[self.offsets[id(p)] - start :][: p.size]
            if p.grad is None:  # unused in this step, or an empty local batch: contributes 0
                view[...] = 0
            else:
                xp.multiply(p.grad.reshape(-1), self._weight, out=view)
            p.grad = None
        counts = [max(0, min(stop, hi) - max(start, lo)) for lo, hi in self.bounds]
        piece = self.pieces.get(k)
        part = empty(counts[self.comm.rank], send.dtype, xp, op="ZeRO's gradient shard")
        self.comm.reduce_scatter(send, counts, part, op="mean")
        if piece is not None:
            shard = piece[2]
            shard.grad = part if shard.grad is None else shard.grad + part
        self.stats["bytes_reduced"] += send.nbytes
        self._reduced[k], self._ready[k] = True, set()

    def step(self):
        """Reduce-scatter what backward has not, check the gradient finite on every rank,
        update this rank's shard, then all-gather the weights."""
        for k in range(len(self.runs)):
            if not self._reduced[k]:
                self._reduce(k)
        xp = get_array_module(self.weights)
        for _, _, shard in self.pieces.values():
            if shard.grad is None:  # the empty shard of a rank with no parameters
                shard.grad = xp.zeros(shard.shape, dtype=shard.dtype)
        finite = all(_finite(shard.grad) for _, _, shard in self.pieces.values())
        bad = np.array([0.0 if finite else 1.0])
        if self.comm.allreduce(bad, op="sum")[0]:
            self._clear()
            raise NonFiniteGradientError(
                "the gradient averaged over all ranks is not finite (NaN or inf); "
                "no update was applied"
            )
        self.optimizer.step()
        self.comm.allgatherv(self.weights, self.counts)
        self.stats["steps"] += 1
        self._clear()

    def _clear(self):
        self._weight = 1.0
        for _, _, shard in self.pieces.values():
            shard.grad = None
        self._reduced = [False] * len(self.runs)

    def state_dict(self):
        """The one-process optimizer's state (every parameter's, gathered: collective)."""
        states = self.optimizer.state
        serial = [{} for _ in self.full]
        xp = get_array_module(self.weights)
        for key in sorted(states[0]):
            if not hasattr(states[0][key], "shape") or states[0][key].ndim != 1:
                for state in serial:
                    state[key] = states[0][key]
                continue
            whole = xp.empty_like(self.weights)
            for (lo, hi, _), state in zip(self.pieces.values(), states):
                whole[lo:hi] = state[key]
            self.comm.allgatherv(whole, self.counts)
            for p, state in zip(self.full, serial):
                start = self.offsets[id(p)]
                state[key] = whole[start : start + p.size].reshape(p.shape).copy()
        return {"hyper": self.optimizer.state_dict()["hyper"], "state": serial}

    def load_state_dict(self, state_dict):
        """This rank's shard of a one-process optimizer's ``state_dict``."""
        states = state_dict["state"]
        if len(states) != len(self.full):
            raise ValueError(
                f"ZeroOptimizer.load_state_dict: the state holds {len(states)} parameters, the "
                f"model has {len(self.full)}"
            )
        xp = get_array_module(self.weights)
        pieces = [{} for _ in self.pieces]
        for key in states[0] if states else ():
            values = [state[key] for state in states]
            if not hasattr(values[0], "shape"):
                for piece in pieces:
                    piece[key] = values[0]
                continue
            whole = xp.empty_like(self.weights)
            for p, value in zip(self.full, values):
                start = self.offsets[id(p)]
                whole[start : start + p.size] = xp.asarray(value).reshape(-1)
            for (lo, hi, _), piece in zip(self.pieces.values(), pieces):
                piece[key] = whole[lo:hi].copy()
        self.optimizer.load_state_dict({"hyper": state_dict["hyper"], "state": pieces})
