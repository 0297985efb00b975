"""Checks of the data_parallel exercises (7.x): synchronous data parallelism with gradient buckets.

Oracles that run no exercise region: minidl's tuned bucket assignment
(``minidl.dist.data_parallel.make_buckets``), the mean of every rank's seeded
random gradients computed on each rank in float64, and the rank idiom
(rank r's gradient is r everywhere, so the mean is (P-1)/2 exactly).
"""

import numpy as np

from minidl import optim
from minidl.dist import data_parallel as tuned_data_parallel
from minidl.dist.data_parallel import make_buckets
from minidl.exercises import exercise, expect_close, expect_equal
from minidl.exercises.checks.collectives import expect_on_every_rank, rank_input
from minidl.exercises.checks.tuned import forbids
from minidl.exercises.strict_comm import StrictComm
from minidl.layers import Parameter
from minidl.reference.dist import buckets as bucketed

PATH = "minidl/reference/dist/buckets.py"
SHAPES = ((3, 4), (4,), (5, 3), (5,), (2, 5), (2,), (7,))  # float32: 48, 16, 60, 20, 40, 8, 28 B
BUCKET_BYTES = (1, 60, 100, 1 << 20)  # one bucket per parameter ... all in one
SEED = 7


def parameters(rank):
    """Float32 parameters of SHAPES holding rank ``rank``'s seeded random values."""
    return [
        Parameter(rank_input(rank, int(np.prod(shape)), "float32", SEED + i).reshape(shape))
        for i, shape in enumerate(SHAPES)
    ]


def rank_grads(rank):
    """Rank ``rank``'s seeded random gradients; rank 0 has none for parameter 2 (unused there)."""
    grads = [
        rank_input(rank, int(np.prod(shape)), "float32", SEED + 100 + i).reshape(shape)
        for i, shape in enumerate(SHAPES)
    ]
    if rank == 0:
        grads[2] = None
    return grads


def grouping(buckets, params):
    """Each bucket as the indices of its parameters in ``params``."""
    index = {id(p): i for i, p in enumerate(params)}
    return [[index[id(p)] for p in bucket] for bucket in buckets]


@exercise(
    "7.1",
    "Gradient buckets: group, flatten, allreduce-average, copy back",
    path=PATH,
    ranks=3,
    hint="walk the parameters last to first, closing a bucket when the next one "
    "would not fit; per bucket concatenate the flat gradients, allreduce "
    "with op='mean' and cut the result back into gradient-shaped pieces",
)
@forbids(tuned_data_parallel, name="minidl's tuned data parallelism (minidl.dist.data_parallel)")
def check_buckets(comm):
    rank, size = comm.rank, comm.size
    everyone = [rank_grads(r) for r in range(size)]
    mean = [
        np.mean(
            [np.zeros(shape) if g[i] is None else g[i].astype(np.float64) for g in everyone], axis=0
        )
        for i, shape in enumerate(SHAPES)
    ]
    comparisons, groupings, counts = [], [], []
    for bucket_bytes in BUCKET_BYTES:
        params = parameters(rank)
        buckets = [b.params for b in make_buckets(params, bucket_bytes)]  # the tuned grouping
        groupings.append((bucket_bytes, params, grouping(buckets, params)))
        for p, g in zip(params, rank_grads(rank)):
            p.grad = g
        counting = StrictComm(comm)
        bucketed.average_gradients(counting, buckets)
        counts.append((bucket_bytes, len(buckets), counting.allreduces))
        comparisons += [
            (
                f"mean over {size} ranks of the random gradient of parameter {i} "
                f"{p.shape}, buckets of {bucket_bytes} B",
                p.grad,
                mean[i].astype("float32"),
                1e-5,
            )
            for i, p in enumerate(params)
        ]
        for p in params:
            p.grad = np.full(p.shape, rank, dtype="float32")
        bucketed.average_gradients(comm, buckets)
        comparisons += [
            (
                f"mean gradient of parameter {i} {p.shape} when each rank's is its "
                f"rank, buckets of {bucket_bytes} B",
                p.grad,
                np.full(p.shape, (size - 1) / 2, dtype="float32"),
                0.0,
            )
            for i, p in enumerate(params)
        ]

    params = parameters(rank)
    wrapped = bucketed.BucketedDataParallel(optim.SGD(params, lr=1.0), comm, bucket_bytes=100)
    for p in params:
        p.grad = np.full(p.shape, rank, dtype="float32")
    wrapped.step()
    comparisons += [
        (
            f"parameter {i} after one SGD step (lr 1) from rank 0's weights, each "
            "rank's gradient its rank",
            p.data,
            q.data - np.float32((size - 1) / 2),
            1e-6,
        )
        for i, (p, q) in enumerate(zip(params, parameters(0)))
    ]

    def verify():
        for bucket_bytes, buckets, allreduces in counts:
            expect_equal(
                f"allreduces of average_gradients on {buckets} buckets of at most {bucket_bytes} "
                "bytes (one per bucket: a bucket is flattened and sent at once)",
                allreduces,
                buckets,
            )
        for bucket_bytes, params, tuned in groupings:
            expect_equal(
                f"parameters (indices into the list) in each bucket of at most "
                f"{bucket_bytes} bytes, last parameter first",
                grouping(bucketed.assign_buckets(params, bucket_bytes), params),
                tuned,
            )
        for what, got, expected, tolerance in comparisons:
            expect_equal(
                f"{what}: dtype",
                str(getattr(got, "dtype", type(got).__name__)),
                str(expected.dtype),
            )
            expect_close(what, got, expected, rtol=tolerance, atol=tolerance)

    expect_on_every_rank(comm, verify)
