"""Synchronous data parallelism (``data_parallel.py``) with compressed gradients.

After backward, the whole gradient, one flat vector, is averaged over all
ranks in a compressor's wire format (no buckets, no overlap with backward).
"""

import time

import numpy as np

from minidl.backend import get_array_module
from minidl.dist.compression import GradientEncoder
from minidl.dist.data_parallel import FlatBuffer, ReplicatedOptimizer


class CompressedAllreduce:
    """Average a gradient vector over all ranks through a compressed wire format.

    fp16 halves can be added, so they are allreduced as they are. The other
    formats cannot be summed without decoding them (a sum of two top-k vectors
    is not a top-k vector), so every rank's payload is allgathered and each
    rank decodes all n and averages them in rank order: every replica gets the
    same bits. ``bytes_sent`` counts this rank's payloads (what the collective
    spreads); an allgather then carries n - 1 of them into each rank.
    """

    def __init__(self, comm, encoder, algorithm="auto"):
        self.comm, self.encoder, self.algorithm = comm, encoder, algorithm
        summable = encoder.compressor.summable
        self.gathered = None if summable else np.empty((comm.size, encoder.wire_bytes), np.uint8)
        self.steps = 0

    def mean(self, grad):
        """The average over ranks of every rank's compressed ``grad`` (float32, host)."""
        payload, _ = self.encoder.encode(grad)
        self.steps += 1
        compressor, n = self.encoder.compressor, self.encoder.n
        if self.gathered is None:
            halves = payload.view(np.float16).copy()
            self.comm.allreduce(halves, op="mean", algorithm=self.algorithm)
            return halves.astype(np.float32)
        self.comm.allgather(payload, self.gathered)
        total = compressor.decode(self.gathered[0], n)
        for rank in range(1, self.comm.size):
            total += compressor.decode(self.gathered[rank], n)
        total /= np.float32(self.comm.size)
        return total

    def record(self, epoch):
        """A metrics record: scheme, error feedback, bytes per step against float32."""
        n = self.encoder.n
        return {
            "kind": "compression",
            "epoch": epoch,
            "scheme": self.encoder.compressor.name,
            "error_feedback": self.encoder.residual is not None,
            "steps": self.steps,
            "payload_bytes_per_step": self.encoder.wire_bytes,
            "float32_bytes_per_step": 4 * n,
            "ratio": self.encoder.wire_bytes / (4 * n) if n else 0.0,
        }


class CompressedOptimizer(ReplicatedOptimizer):
    """Wrap ``optimizer``: ``step()`` applies the gradient averaged in ``compressor``'s format.

    ``compressor``: a ``minidl.dist.compression`` scheme (``Float16()``,
    ``TopK(ratio=0.01)``...); ``error_feedback``: carry what it dropped into
    the next step (None: the scheme's default); random rounding is seeded by
    ``seed`` and the rank; ``allreduce``: the algorithm that sums fp16
    payloads; ``model`` as for ``DistributedOptimizer``. ``stats`` counts the
    payload bytes; ``compression_record(epoch)`` is the metrics record.
    """

    def __init__(
        self, optimizer, comm, compressor, error_feedback=None, seed=0, allreduce="auto", model=None
    ):
        super().__init__(optimizer, comm, allreduce, model)
        self.whole = FlatBuffer(optimizer.params)
        xp = get_array_module(self.whole.flat)
        encoder = GradientEncoder(
            compressor, self.whole.size, error_feedback, [seed, comm.rank], xp
        )
        self.compressed = CompressedAllreduce(comm, encoder, allreduce)

    def _average_gradients(self):
        start = time.perf_counter()
        mean = self.compressed.mean(self.whole.gather_grads(self._weight))
        self.whole.flat[...] = get_array_module(self.whole.flat).asarray(mean)
        self.whole.scatter_grads()
        self.stats["comm_seconds"] += time.perf_counter() - start
        self.stats["bytes_reduced"] += self.compressed.encoder.wire_bytes
        return [self.whole.flat]

    def compression_record(self, epoch):
        """The compression's metrics record for ``epoch`` (see ``CompressedAllreduce.record``)."""
        return self.compressed.record(epoch)
