"""Synchronous data parallelism: replicas that average their gradients before every update.

Each of n ranks computes the gradient g_i of its shard of the minibatch and all apply
g = (1/n) sum_i g_i, so the replicas stay identical: with local batches of b, minibatch
SGD with batch n*b (Ben-Nun & Hoefler 2019, §5.1, §6.1). ``FlatBuffer`` and
``OptimizerWrapper`` serve ``consistency/`` too; ``zero.py`` shards what the replicas
repeat (ZeRO).
"""

import math
import time

from minidl.autograd import no_grad
from minidl.backend import get_array_module
from minidl.dist.collectives import check_algorithm


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
    of one dtype of at most ``bucket_bytes`` each (``bucket_runs``)."""
    runs = bucket_runs(
        [p.size * p.dtype.itemsize for p in params], bucket_bytes, [p.dtype for p in params]
    )
    return [Bucket(index, [params[i] for i in run]) for index, run in enumerate(runs)]


def bucket_runs(sizes, bucket_bytes, kinds=None):
    """The indices of items of ``sizes`` bytes, last first, in runs of at most ``bucket_bytes``
    (an item larger alone) that never mix two ``kinds`` (dtypes)."""
    kinds = kinds or [None] * len(sizes)
    runs, run, run_bytes = [], [], 0
    for index in reversed(range(len(sizes))):
        if run and (run_bytes + sizes[index] > bucket_bytes or kinds[index] != kinds[run[0]]):
            runs.append(run)
            run, run_bytes = [], 0
        run.append(index)
        run_bytes += sizes[index]
    return runs + [run] if run else runs


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
