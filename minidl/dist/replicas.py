"""Synchronous data parallelism: what its optimizers share, however they average gradients.

Every rank holds a replica of the model and computes the gradient of its own
shard of the minibatch; before each update the gradients are averaged, so
every replica applies the same update and the replicas stay identical
(Ben-Nun & Hoefler 2019, §5.1, §6.1: the consistent model, decentralised).
With equal local batches b on n ranks this is minibatch SGD with batch n*b.
The subclasses differ in how they average: ``DistributedOptimizer`` in
buckets overlapped with backward, ``CompressedOptimizer`` in a compressed
wire format.
"""

import math

from minidl.dist.collectives import check_algorithm
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


class ReplicatedOptimizer(OptimizerWrapper):
    """The wrapped ``optimizer`` on identical replicas; subclasses define ``_average_gradients``.

    Constructing it checks that every rank built the same model and
    broadcasts parameters, buffers and optimizer state from rank 0.
    ``allreduce``: ``"auto"`` or one of ``minidl.dist.ALLREDUCE_ALGORITHMS``;
    ``model``: its buffers (batch-norm statistics) are broadcast too, and its
    parameter names appear in errors. ``stats`` counts steps, seconds spent
    averaging and bytes sent.
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
        """Weight this rank's next gradient by its share of the global batch.

        The allreduce averages per-rank mean gradients; when local batches
        differ in size (the last step of an epoch), weighting each by
        ``local_count * size / global_count`` makes the average the exact
        mean gradient over the global batch. Call before ``backward()``.
        """
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
