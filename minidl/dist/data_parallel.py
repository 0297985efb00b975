"""Synchronous data parallelism: any optimizer, with gradients averaged over all ranks.

Every rank holds a replica of the model and computes the gradient of its own
shard of the minibatch; before each update the gradients are averaged
(allreduce), so every replica applies the same update and the replicas stay
identical (Ben-Nun & Hoefler 2019, §5.1, §6.1: the consistent model, decentralised). With
equal local batches b on n ranks this is minibatch SGD with batch n*b.

``DistributedOptimizer`` wraps any optimizer: constructing it broadcasts parameters and
buffers from rank 0 and checks that every rank built the same model; its
``step()`` averages, then calls the wrapped optimizer's ``step()``. It
exposes the wrapped optimizer's ``params``, ``state``, ``lr`` (read and set,
so LR schedules drive it), ``zero_grad`` and state dicts
(``wrapper.OptimizerWrapper``); the rest of it is on ``.optimizer``.

Gradients travel in buckets: consecutive parameters (in reverse order, the
order backward produces them) fused into flat buffers of about ``bucket_mb``
MB, so many small tensors cost one message. With ``overlap=True`` a bucket's
allreduce starts as soon as its last gradient is accumulated, while backward
computes the earlier layers; ``step()`` waits for them. Buckets always start
in index order (a bucket that completes early waits for its predecessors), so
every rank issues the same collectives in the same order.
"""
import math
import time

from minidl.backend import get_array_module
from minidl.dist.collectives import check_algorithm
from minidl.dist.compression import CompressedAllreduce, make_compressor
from minidl.dist.flat import FlatBuffer
from minidl.dist.wrapper import OptimizerWrapper


class NonFiniteGradientError(ArithmeticError):
    """The averaged gradient holds NaN or inf: every rank stops before the update.

    The check runs after the allreduce, on values every rank holds equally,
    so all ranks decide alike (a decision on local values alone would leave
    the others waiting in the next collective).
    """


def _finite(flat):
    """True when no element is NaN or inf (one float64 sum: NaN and inf propagate)."""
    return math.isfinite(float(flat.sum(dtype="float64")))


class Bucket(FlatBuffer):
    """A flat gradient buffer for a run of parameters of one dtype."""

    def __init__(self, index, params):
        super().__init__(params)
        self.index = index
        self.ready = set()
        self.request = None
        self.sent = []  # the gradient arrays copied into ``flat`` at launch


def make_buckets(params, bucket_bytes):
    """Group parameters, last first, into runs of one dtype of at most ``bucket_bytes`` each."""
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


class DistributedOptimizer(OptimizerWrapper):
    """Wrap ``optimizer`` so that ``step()`` applies the gradient averaged over ``comm``'s ranks.

    ``allreduce``: ``"auto"`` or one of ``minidl.dist.ALLREDUCE_ALGORITHMS``;
    ``bucket_mb``: the size of the fused gradient buffers; ``overlap``: start
    each bucket's allreduce during backward; ``model``: its buffers (batch-norm
    statistics) are broadcast from rank 0 too, and its parameter names appear
    in errors. ``compression``: a ``minidl.dist.compression`` spec ("fp16",
    "topk:0.01", ...): the whole gradient is then averaged after backward
    through ``CompressedAllreduce`` (no buckets, no overlap), with
    ``error_feedback`` (None: the scheme's default) and random rounding
    seeded by ``seed`` and the rank.

    Use it like the wrapped optimizer (``step()``, ``zero_grad()``, ``lr``,
    ``state_dict()``); its other attributes are on ``.optimizer``.
    """

    def __init__(self, optimizer, comm, allreduce="auto", bucket_mb=4, overlap=True, model=None,
                 compression=None, error_feedback=None, seed=0):
        check_algorithm(allreduce)
        if bucket_mb <= 0:
            raise ValueError(f"DistributedOptimizer: bucket_mb={bucket_mb} must be positive")
        super().__init__(optimizer)
        self.comm, self.algorithm, self.overlap, self.model = comm, allreduce, overlap, model
        self._weight = 1.0
        self._hooks = []
        self._next_launch = 0
        self.stats = {"steps": 0, "comm_seconds": 0.0, "exposed_seconds": 0.0,
                      "overlapped_seconds": 0.0, "bytes_reduced": 0}
        params = optimizer.params
        self._check_same_model(params, self._param_names(params))
        self.buckets = make_buckets(params, int(bucket_mb * 2**20))
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}
        self.whole = self.compressed = None  # the whole gradient, when it is compressed
        if make_compressor(compression).name != "none":
            self.whole = FlatBuffer(params)
            self.compressed = CompressedAllreduce(comm, self.whole.size, compression,
                                                  error_feedback, seed, allreduce,
                                                  xp=get_array_module(self.whole.flat))
        self.broadcast_state()
        if overlap and comm.size > 1 and self.compressed is None:
            for p in params:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready))

    # ---- set-up ------------------------------------------------------------------------
    def _param_names(self, params):
        if self.model is None:
            return [f"parameter {i}" for i in range(len(params))]
        by_id = {id(p): n for n, p in self.model.named_parameters()}
        return [by_id.get(id(p), f"parameter {i}") for i, p in enumerate(params)]

    def _check_same_model(self, params, names):
        """Raise on every rank, naming the first rank whose parameters differ from rank 0's."""
        mine = [(tuple(p.shape), str(p.dtype)) for p in params]
        everyone = self.comm.allgather_object(mine)
        for rank, theirs in enumerate(everyone):
            if theirs == everyone[0]:
                continue
            if len(theirs) != len(everyone[0]):
                detail = f"{len(theirs)} parameters instead of {len(everyone[0])}"
            else:
                i = next(i for i, (a, b) in enumerate(zip(theirs, everyone[0])) if a != b)
                (shape, dtype), (shape0, dtype0) = theirs[i], everyone[0][i]
                detail = (f"{names[i]} is {shape} {dtype} there but {shape0} {dtype0} "
                          "on rank 0")
            raise ValueError(f"DistributedOptimizer: rank {rank} built a different model: "
                             f"{detail}; every rank must build the same model")

    def broadcast_state(self, root=0):
        """Copy parameters, model buffers and existing optimizer state from ``root`` to all ranks."""
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
        """Weight this rank's next gradient by its share of the global batch.

        The allreduce averages per-rank mean gradients; when local batches
        differ in size (the last step of an epoch), weighting each by
        ``local_count * size / global_count`` makes the average the exact
        mean gradient over the global batch. Call before ``backward()``.
        """
        self._weight = local_count * self.comm.size / max(global_count, 1)

    # ---- the step -------------------------------------------------------------------------
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

    def step(self):
        """Average the gradients over all ranks, then apply the wrapped optimizer's update."""
        if self.compressed is not None:
            start = time.perf_counter()
            mean = self.compressed.mean(self.whole.gather_grads(self._weight))
            self.whole.flat[...] = get_array_module(self.whole.flat).asarray(mean)
            self.whole.scatter_grads()
            self.stats["comm_seconds"] += time.perf_counter() - start
            self.stats["bytes_reduced"] += self.compressed.encoder.wire_bytes
        elif self.comm.size > 1:
            backward_done = time.perf_counter()
            for bucket in self.buckets:  # buckets no hook completed start now, in order
                bucket.ready.update(id(p) for p in bucket.params)
            self._launch_ready()
            for bucket in self.buckets:
                bucket.request.wait()
                self._record(bucket, backward_done)
                if any(p.grad is not g for p, g in zip(bucket.params, bucket.sent)):
                    # another backward accumulated into the gradients after the early
                    # start (gradient accumulation): reduce the final values again
                    self._launch(bucket)
                    bucket.request.wait()
                bucket.scatter_grads()
                bucket.ready.clear()
                bucket.request = None
            self.stats["exposed_seconds"] += time.perf_counter() - backward_done
            self._next_launch = 0
        self._weight = 1.0
        if self.comm.size > 1 and not all(_finite(f) for f in self._flats()):
            raise NonFiniteGradientError(
                "the gradient averaged over all ranks is not finite (NaN or inf); "
                "no update was applied")
        self.stats["steps"] += 1
        self.optimizer.step()

    def _flats(self):
        return [self.whole.flat] if self.compressed is not None else [b.flat for b in self.buckets]

    def _record(self, bucket, backward_done):
        request = bucket.request
        self.stats["comm_seconds"] += request.finished - request.started
        self.stats["overlapped_seconds"] += max(0.0, min(request.finished, backward_done)
                                                - request.started)
        self.stats["bytes_reduced"] += bucket.flat.nbytes

    def compression_record(self, epoch):
        """The compression's metrics record for ``epoch`` (see ``CompressedAllreduce.record``)."""
        if self.compressed is None:
            raise ValueError("compression_record: this optimizer averages uncompressed gradients; "
                             "construct it with compression='fp16' (or another scheme) to get one")
        return self.compressed.record(epoch)

    def overlap_fraction(self):
        """Share of allreduce time that ran while backward was still computing (0..1)."""
        total = self.stats["comm_seconds"]
        return self.stats["overlapped_seconds"] / total if total > 0 else 0.0

    def remove_hooks(self):
        """Unregister the gradient hooks (the wrapper then averages in ``step()`` only)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
