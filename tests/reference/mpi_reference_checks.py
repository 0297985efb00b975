"""Checks of the distributed reference tier: ``mpiexec -n N python mpi_reference_checks.py NAME``.

A NAME is an exercise id (``6.1``: its check, called as the grader calls it,
``check(md.dist.init())``) or one of the ``check_<name>`` functions below.
A passing rank prints ``CHECK <name> OK rank <r>``, which the tests count;
an assertion aborts the whole job (non-zero exit).
"""

import sys

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.dist.collectives import REFERENCE_ALGORITHMS
from minidl.exercises import ExerciseFailure, catalogue
from minidl.exercises.checks.collectives import check_allreduce, digest, exact_sum, rank_input
from minidl.reference.dist import allreduce
from minidl.reference.dist.buckets import BucketedDataParallel
from tests.distributed.mpi_checks import run_named_checks


def lengths(size):
    """Nothing, fewer elements than ranks, uneven blocks, primes, and a long array."""
    return sorted({0, 1, 2, size - 1, size, size + 1, 7, 13, 97, 1009, 10007})


CASES = (("float64", "sum"), ("float32", "sum"), ("float32", "mean"), ("int32", "sum"))


def check_reference_sums(comm):
    """Every reference algorithm equals the exact sum (and mean), with the same bits on every rank.

    Through ``comm.allreduce(x, op, "<algo>_reference")`` and by calling the
    function itself with the Communicator (which also covers n = 0 and P = 1,
    where ``allreduce`` returns before running any algorithm).
    """
    size = comm.size
    cases, digests = [], []
    for algorithm in REFERENCE_ALGORITHMS:
        textbook = getattr(allreduce, algorithm[: -len("_reference")])
        for length in lengths(size):
            for dtype, op in CASES:
                inputs = [rank_input(r, length, dtype, seed=11) for r in range(size)]
                exact, tolerance = exact_sum(inputs)
                x = inputs[comm.rank].copy()
                assert comm.allreduce(x, op, algorithm) is x
                assert x.dtype == np.dtype(dtype)
                if op == "mean":
                    exact = exact / size
                    rounding = np.finfo(dtype).eps * np.abs(exact).max(initial=0)
                    tolerance = tolerance / size + rounding
                else:
                    direct = inputs[comm.rank].copy()
                    assert textbook(comm, direct) is direct
                    assert np.array_equal(direct, x), (algorithm, length, dtype)
                err = np.abs(x - exact)
                assert bool((err <= tolerance).all()), (algorithm, length, dtype, op, err.max())
                cases.append(f"{algorithm} n={length} {dtype} {op}")
                digests.append(digest(x))
    for case, hashes in zip(cases, zip(*comm.allgather_object(digests))):
        assert len(set(hashes)) == 1, f"{case}: the ranks hold different bits"


def check_failure_reaches_every_rank(comm):
    """A wrong result on the last rank only: every rank raises that rank's failure."""

    def wrong_on_last_rank(comm, x):
        allreduce.ring(comm, x)
        if comm.rank == comm.size - 1 and x.size:
            x[0] += 1

    try:
        check_allreduce(comm, wrong_on_last_rank, "ring")
    except ExerciseFailure as failure:
        assert str(failure).startswith(f"rank {comm.size - 1} of {comm.size}: "), str(failure)
        assert "expected" in str(failure) and "index (0,)" in str(failure), str(failure)
    else:
        raise AssertionError("a wrong result on one rank passed the check")


def mlp(seed):
    md.manual_seed(seed)
    return L.Sequential(L.Linear(6, 8, dtype="float64"), L.Tanh(), L.Linear(8, 3, dtype="float64"))


def train(model, opt, batches, part=slice(None)):
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(model(md.tensor(x[part], dtype="float64")), y[part]).backward()
        opt.step()


def check_bucketed_equivalence(comm):
    """Synchronous data parallelism's invariant: P ranks with b samples each = one process with Pb.

    float64 throughout; the replicas start from different weights (rank 0's
    are broadcast) and must end bit-identical.
    """
    local_batch, steps = 4, 3
    rng = np.random.default_rng(5)
    batches = [
        (
            rng.standard_normal((local_batch * comm.size, 6)),
            rng.integers(0, 3, local_batch * comm.size),
        )
        for _ in range(steps)
    ]
    reference = mlp(100)
    train(reference, optim.Momentum(reference.parameters(), lr=0.1, momentum=0.9), batches)
    shard = slice(comm.rank * local_batch, (comm.rank + 1) * local_batch)
    for algorithm, bucket_bytes in (
        ("auto", 1 << 20),
        ("mpi", 200),
        ("ring_reference", 300),
        ("rabenseifner_reference", 1),
    ):
        model = mlp(100 + comm.rank)
        opt = BucketedDataParallel(
            optim.Momentum(model.parameters(), lr=0.1, momentum=0.9),
            comm,
            bucket_bytes=bucket_bytes,
            algorithm=algorithm,
        )
        train(model, opt, batches, shard)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            np.testing.assert_allclose(
                p.data,
                q.data,
                rtol=1e-12,
                atol=1e-14,
                err_msg=f"{name}, {algorithm}, buckets of {bucket_bytes} B",
            )
        weights = np.concatenate([p.data.ravel() for p in model.parameters()])
        assert len(set(comm.allgather_object(digest(weights)))) == 1, "replicas differ"


if __name__ == "__main__":
    exercises = {f"check_{e.id}": e.check for e in catalogue() if e.ranks}
    run_named_checks({**globals(), **exercises}, sys.argv[1:])
