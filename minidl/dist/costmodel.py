"""The alpha-beta-gamma cost model of allreduce, fitted on the running machine.

A message of m bytes between two ranks takes ``alpha + m*beta`` (alpha:
latency in s, beta: inverse bandwidth in s/byte, fitted to a ping-pong);
adding m bytes of one array into another takes ``m*gamma`` (fitted to the
same segment-wise ``np.add`` the algorithms run).

Ben-Nun & Hoefler (2019, §2.5; their L = alpha, G = beta, gamma*m = bytes)
give, for P a power of two::

    T_tree = 2 log2(P) (alpha + m beta)
    T_bfly =   log2(P) (alpha + m beta)
    T_pipe = 2 (P-1) (alpha + (m/P) beta)
    T_rabe = 2 alpha log2(P) + 2 m beta (P-1)/P

These ignore the local reduction, which on a shared-memory node costs about
as much as the transfers. ``predict`` adds it, counting the bytes added on
the critical path of each algorithm in ``collectives.py``:

* tree: ``L m gamma`` (the root adds a full array in each of L rounds);
* butterfly: ``k m gamma`` (one full add per exchange);
* ring: ``(P-1) (m/P) gamma`` (one block per reduce-scatter step);
* rabenseifner: ``m gamma (p2-1)/p2`` (m/2 + m/4 + ... in the halvings).

For P not a power of two: the binomial tree takes ``L = ceil(log2 P)``
rounds; the butterfly and Rabenseifner run on ``p2 = 2^k``, the largest power
of two <= P (k = floor(log2 P)), after folding the other ranks in, which adds
``2 (alpha + m beta) + m gamma``. The mean's final division and the
per-segment latency of pipelined exchanges are left out (both are small).
"""
import time
from collections import namedtuple

import numpy as np

from minidl import backend
from minidl.dist import collectives

CostParams = namedtuple("CostParams", "alpha beta gamma")
CostParams.__doc__ = "Latency alpha (s), inverse bandwidth beta (s/byte), reduction cost gamma (s/byte)."

MODELLED_ALGORITHMS = ("ring", "butterfly", "tree", "rabenseifner")

PINGPONG_SIZES = (8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24, 1 << 26)
GAMMA_BYTES = 1 << 26


def predict(algorithm, nbytes, size, params):
    """Predicted seconds of one allreduce of ``nbytes`` over ``size`` ranks (see the module doc)."""
    if algorithm not in MODELLED_ALGORITHMS:
        raise ValueError(f"costmodel: no formula for {algorithm!r} (the MPI library picks its own "
                         f"algorithm); model one of {', '.join(MODELLED_ALGORITHMS)}, or use "
                         "choose_by_measurement to include 'mpi'")
    alpha, beta, gamma = params
    m = float(nbytes)
    if size == 1 or m == 0:
        return 0.0
    p2 = 1 << (size.bit_length() - 1)
    k = p2.bit_length() - 1
    fold = 0.0 if p2 == size else 2 * (alpha + m * beta) + m * gamma
    if algorithm == "tree":
        rounds = (size - 1).bit_length()
        return 2 * rounds * (alpha + m * beta) + rounds * m * gamma
    if algorithm == "butterfly":
        return k * (alpha + m * beta + m * gamma) + fold
    if algorithm == "ring":
        return 2 * (size - 1) * (alpha + m / size * beta) + (size - 1) * m / size * gamma
    return 2 * k * alpha + (p2 - 1) / p2 * m * (2 * beta + gamma) + fold


def choose(nbytes, size, params, algorithms=MODELLED_ALGORITHMS):
    """The algorithm with the smallest predicted time (the first one on ties)."""
    return min(algorithms, key=lambda name: predict(name, nbytes, size, params))


RULE_THRESHOLD_BYTES = 4 << 20


def choose_by_rule(nbytes):
    """The fixed pick of ``algorithm="auto"``: the MPI library's own below 4 MiB, ring above.

    Measured on two ranks of one machine (benchmarks/RESULTS.md): MPICH's
    allreduce is the fastest below ~4 MB, the bandwidth-optimal ring (with
    Rabenseifner) above it, at 0.64x MPICH's time for AlexNet's 244 MB.
    Unlike a timed choice it never changes between runs, so results do not.
    """
    return "mpi" if nbytes < RULE_THRESHOLD_BYTES else "ring"


def fit_alpha_beta(sizes, times):
    """Least-squares ``t = alpha + m*beta`` on relative errors (so small sizes count).

    Returns (alpha, beta) with alpha >= 0 (refitted through the origin when
    the intercept comes out negative).
    """
    m = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    weight = 1.0 / t
    design = np.stack([np.ones_like(m), m], axis=1) * weight[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, t * weight, rcond=None)
    if alpha < 0:
        alpha = 0.0
        beta = np.sum(m * t * weight ** 2) / np.sum((m * weight) ** 2)
    return float(alpha), float(beta)


def _round_trips(nbytes):
    return max(3, min(200, (1 << 22) // max(nbytes, 1)))


def pingpong(mpi_comm, sizes=PINGPONG_SIZES, batches=3):
    """One-way message time (median of batches, half a round trip) between ranks 0 and 1.

    Every rank must call it; ranks other than 0 and 1 wait and get None.
    """
    comm = mpi_comm.Dup()
    rank = comm.Get_rank()
    times = None
    if rank < 2:
        buffer = np.ones(max(sizes), dtype=np.uint8)
        peer = 1 - rank
        times = []
        for nbytes in sizes:
            message = buffer[:nbytes]
            batch_times = []
            for batch in range(batches + 1):  # batch 0 warms up
                start = time.perf_counter()
                for _ in range(_round_trips(nbytes)):
                    if rank == 0:
                        comm.Send(message, peer)
                        comm.Recv(message, peer)
                    else:
                        comm.Recv(message, peer)
                        comm.Send(message, peer)
                if batch:
                    batch_times.append((time.perf_counter() - start) / (2 * _round_trips(nbytes)))
            times.append(float(np.median(batch_times)))
    comm.Barrier()
    comm.Free()
    return times


def measure_gamma(nbytes=GAMMA_BYTES, repeats=5):
    """Seconds per byte of the segment-wise in-place add that the algorithms run."""
    target = np.zeros(nbytes // 4, dtype=np.float32)
    segment = max(1, collectives.SEGMENT_BYTES // 4)
    tmp = np.ones(min(segment, target.size), dtype=np.float32)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        for offset in range(0, target.size, segment):
            part = target[offset:offset + segment]
            np.add(part, tmp[:part.size], out=part)
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:])) / target.nbytes


def fit(comm, sizes=PINGPONG_SIZES):
    """Fit ``CostParams`` on ``comm`` (a ``Communicator``); collective, same result on every rank.

    alpha and beta come from a ping-pong between ranks 0 and 1, gamma from
    rank 0's local add; rank 0 broadcasts them so every rank makes the same
    ``choose`` decisions.
    """
    times = pingpong(comm.mpi, sizes) if comm.size > 1 else None
    params = None
    if comm.rank == 0:
        alpha, beta = fit_alpha_beta(sizes, times) if times else (0.0, 0.0)
        params = CostParams(alpha, beta, measure_gamma())
    return CostParams(*comm.bcast_object(params))


def time_allreduce(comm, array, algorithm, repeats, op="sum", warmup=True):
    """Seconds of ``repeats`` allreduces, each the maximum over ranks, started after a barrier."""
    if warmup:
        comm.allreduce(array, op, algorithm)
    times = np.empty(repeats)
    for i in range(repeats):
        comm.barrier()
        start = time.perf_counter()
        comm.allreduce(array, op, algorithm)
        backend.synchronize(array)
        times[i] = time.perf_counter() - start
    return comm.allgather(times).max(axis=0)


def choose_by_measurement(comm, array, algorithms=collectives.ALLREDUCE_ALGORITHMS, repeats=3):
    """The fastest algorithm for arrays like ``array``, timed on a zero array of its size.

    Collective; every rank gets the same answer (the times are maxima over ranks).
    """
    xp = backend.get_array_module(array)
    probe = xp.zeros(array.shape, dtype=array.dtype)
    medians = {name: float(np.median(time_allreduce(comm, probe, name, repeats)))
               for name in algorithms}
    return min(algorithms, key=medians.get)
