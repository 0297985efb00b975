"""The alpha-beta-gamma cost of allreduce, fitted on the running machine.

A message of m bytes between two ranks takes ``alpha + m*beta`` (alpha:
latency in s, beta: inverse bandwidth in s/byte, fitted to a ping-pong);
adding m received bytes into one's own takes ``m*gamma`` (fitted to the
segment-wise ``np.add`` the algorithms run). An allreduce then costs

    T = alpha * messages + beta * bytes sent + gamma * bytes added

counted along its critical path (``critical_path``). These are the
formulas of Thakur, Rabenseifner & Gropp (2005) and Ben-Nun & Hoefler
(2019, §2.5, who leave out gamma); ``minidl/reference/perf/allreduce_cost.py``
writes each out in closed form, and the tests hold ``predict`` equal to it.

``algorithm="auto"`` (``minidl.dist.collectives.AutoChoice``) picks among
``AUTO_ALGORITHMS`` (never a textbook version) by a fixed rule, by a
measurement (``choose_by_measurement``) or by this model (``fit``, ``choose``).
The functions that measure take a communicator (``minidl.dist.Communicator`` or
anything with its methods) as an argument.
"""

import time
from collections import namedtuple

import numpy as np

from minidl import backend
from minidl.intmath import ceil_log2, largest_power_of_two
from minidl.perf.machine import median_seconds

MODELLED_ALGORITHMS = ("ring", "butterfly", "tree", "rabenseifner")
AUTO_ALGORITHMS = ("mpi",) + MODELLED_ALGORITHMS  # "mpi": the MPI library's own allreduce

PINGPONG_SIZES = (8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24, 1 << 26)
GAMMA_BYTES = 1 << 26


class CostParams(namedtuple("CostParams", "alpha beta gamma")):
    """Latency alpha (s), inverse bandwidth beta (s/byte), reduction cost gamma (s/byte)."""

    __slots__ = ()

    def seconds(self, messages, bytes_sent, bytes_added):
        """alpha * messages + beta * bytes sent + gamma * bytes added."""
        return self.alpha * messages + self.beta * bytes_sent + self.gamma * bytes_added


def critical_path(algorithm, nbytes, size):
    """(messages, bytes sent, bytes added) along the critical path of one allreduce.

    For m bytes on P ranks, with p2 = 2^k the largest power of two <= P and
    L = ceil(log2 P), as ``minidl.dist.collectives`` runs them:

    * tree: 2L messages of m (binomial reduce, then broadcast); the root adds L m;
    * butterfly: k messages of m, each added;
    * ring: 2(P-1) messages of m/P; (P-1) m/P added in the reduce-scatter;
    * rabenseifner: 2k messages carrying 2 m (p2-1)/p2; m (p2-1)/p2 added;

    butterfly and Rabenseifner fold the P - p2 other ranks in and out first:
    2 messages of m more, m added. The mean's division and the per-segment
    latency of pipelined exchanges are left out (both are small).
    """
    if algorithm not in MODELLED_ALGORITHMS:
        raise ValueError(
            f"allreduce cost: no formula for {algorithm!r} (the MPI library picks "
            f"its own algorithm); model one of {', '.join(MODELLED_ALGORITHMS)}, or "
            "use choose_by_measurement to include 'mpi'"
        )
    m, p = float(nbytes), size
    if algorithm == "tree":
        rounds = ceil_log2(p)
        return 2 * rounds, 2 * rounds * m, rounds * m
    if algorithm == "ring":
        return 2 * (p - 1), 2 * (p - 1) * m / p, (p - 1) * m / p
    p2 = largest_power_of_two(p)
    k = p2.bit_length() - 1
    fold = (0, 0.0, 0.0) if p2 == p else (2, 2 * m, m)
    if algorithm == "butterfly":
        path = (k, k * m, k * m)
    else:
        path = (2 * k, 2 * m * (p2 - 1) / p2, m * (p2 - 1) / p2)
    return tuple(a + b for a, b in zip(path, fold))


def predict(algorithm, nbytes, size, params):
    """Predicted seconds of one allreduce of ``nbytes`` over ``size`` ranks (0: nothing to do)."""
    path = critical_path(algorithm, nbytes, size)
    return 0.0 if size == 1 or nbytes == 0 else params.seconds(*path)


def choose(nbytes, size, params, algorithms=MODELLED_ALGORITHMS):
    """The algorithm with the smallest predicted time (the first one on ties)."""
    return min(algorithms, key=lambda name: predict(name, nbytes, size, params))


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
        beta = np.sum(m * t * weight**2) / np.sum((m * weight) ** 2)
    return float(alpha), float(beta)


def _round_trips(nbytes):
    return max(3, min(200, (1 << 22) // max(nbytes, 1)))


def pingpong(comm, sizes=PINGPONG_SIZES, batches=3, pair=(0, 1)):
    """One-way message time (median of batches, half a round trip) between the ranks ``pair``.

    Collective over ``comm``, on a duplicate of it (so no other message can
    match); the other ranks wait and get None.
    """
    comm = comm.dup()
    times = None
    if comm.rank in pair:
        buffer = np.ones(max(sizes), dtype=np.uint8)
        peer = pair[1] if comm.rank == pair[0] else pair[0]
        times = []
        for nbytes in sizes:
            message, trips, batch_times = buffer[:nbytes], _round_trips(nbytes), []
            for batch in range(batches + 1):  # batch 0 warms up
                start = time.perf_counter()
                for _ in range(trips):
                    if comm.rank == pair[0]:
                        comm.send(message, peer)
                        comm.recv(message, peer)
                    else:
                        comm.recv(message, peer)
                        comm.send(message, peer)
                if batch:
                    batch_times.append((time.perf_counter() - start) / (2 * trips))
            times.append(float(np.median(batch_times)))
    comm.barrier()
    return times


def measure_gamma(segment_bytes, nbytes=GAMMA_BYTES, repeats=5):
    """Seconds per byte of adding ``nbytes`` of float32 in place, ``segment_bytes`` at a time."""
    target = np.zeros(nbytes // 4, dtype=np.float32)
    segment = max(1, segment_bytes // 4)
    tmp = np.ones(min(segment, target.size), dtype=np.float32)

    def add():
        for offset in range(0, target.size, segment):
            part = target[offset : offset + segment]
            np.add(part, tmp[: part.size], out=part)

    return median_seconds(add, repeats) / target.nbytes


def fit(comm, segment_bytes, sizes=PINGPONG_SIZES):
    """Fit ``CostParams`` on ``comm``; collective, the same result on every rank.

    alpha and beta come from a ping-pong between ranks 0 and 1, gamma from
    rank 0's local add (in segments of ``segment_bytes``, as the algorithms
    add); rank 0 broadcasts them so every rank makes the same ``choose``
    decisions.
    """
    times = pingpong(comm, sizes) if comm.size > 1 else None
    params = None
    if comm.rank == 0:
        alpha, beta = fit_alpha_beta(sizes, times) if times else (0.0, 0.0)
        params = CostParams(alpha, beta, measure_gamma(segment_bytes))
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


def choose_by_measurement(comm, array, algorithms=AUTO_ALGORITHMS, repeats=3):
    """The fastest algorithm for arrays like ``array``, timed on a zero array of its size.

    Collective; every rank gets the same answer (the times are maxima over ranks).
    """
    xp = backend.get_array_module(array)
    probe = xp.zeros(array.shape, dtype=array.dtype)
    medians = {
        name: float(np.median(time_allreduce(comm, probe, name, repeats))) for name in algorithms
    }
    return min(algorithms, key=medians.get)
