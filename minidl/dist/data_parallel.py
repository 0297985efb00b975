"""Synchronous data parallelism (``replicas.py``) with gradient buckets averaged during backward.

Gradients travel in buckets: consecutive parameters (in reverse order, the
order backward produces them) fused into flat buffers of about ``bucket_mb``
MB, so many small tensors cost one message. With ``overlap=True`` a bucket's
allreduce starts as soon as its last gradient is accumulated, while backward
computes the earlier layers; ``step()`` waits for them. Buckets always start
in index order (a bucket that completes early waits for its predecessors), so
every rank issues the same collectives in the same order.
"""

import time

from minidl.dist.flat import FlatBuffer
from minidl.dist.replicas import ReplicatedOptimizer


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


class DistributedOptimizer(ReplicatedOptimizer):
    """Wrap ``optimizer`` so that ``step()`` applies the gradient averaged over ``comm``'s ranks.

    ``bucket_mb``: the size of the fused gradient buffers; ``overlap``: start
    each bucket's allreduce during backward; ``allreduce`` and ``model``: see
    ``ReplicatedOptimizer``. ``stats`` also counts the seconds of averaging
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
        self._hooks = []
        if overlap and comm.size > 1:
            for p in optimizer.params:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready))

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
                # another backward accumulated into the gradients after the early
                # start (gradient accumulation): reduce the final values again
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

    def remove_hooks(self):
        """Unregister the gradient hooks (the wrapper then averages in ``step()`` only)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
