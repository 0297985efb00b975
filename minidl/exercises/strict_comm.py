"""A communicator for checks: blocking sends are synchronous, and every message is counted.

MPI may return from a blocking ``Send`` before the matching receive starts,
when the message fits the library's eager buffer (MPICH: 64 KiB on shared
memory). An exchange in which both partners send first and receive second
then passes on small messages and deadlocks on large ones. ``StrictComm``
sends with ``Ssend``, which returns only once the receive has started, so
an unsafe order deadlocks at every size, in the check, where the grader
reports the line it waits on.

It also records each message a rank sends (``sent``: destination and
bytes) so a check can hold an algorithm to its pattern: the ring sends
2(P-1) messages of about n/P elements to one neighbour (Patarasuk & Yuan
2009), recursive doubling log2 P whole arrays, recursive halving and
doubling 2 log2 P messages adding up to 2(P-1)/P of the array (Thakur,
Rabenseifner & Gropp 2005); passing whole arrays around gives the same
sums with up to P times the bytes.

The reductions a rank calls are recorded too (``collectives``: allreduce or
reduce_scatter, and the bytes of the result this rank receives), so that ZeRO can be held
to its pattern: a rank receives its shard of the averaged gradient by a reduce-scatter,
not the whole of it by an allreduce (Rajbhandari et al. 2020).
"""

import numpy as np

from ..backend import to_numpy
from ..intmath import ceil_div, ceil_log2, largest_power_of_two


class StrictComm:
    """Wraps a ``minidl.dist`` Communicator: ``send`` is ``Ssend``; ``send``, ``sendrecv`` and
    ``isend`` are counted, and so are allreduces and reduce-scatters; everything else is the
    wrapped communicator's."""

    def __init__(self, comm):
        self._comm = comm
        self.sent = []  # (destination, bytes) of each message, in order
        self.collectives = []  # (name, bytes of the result this rank receives), in order

    @property
    def allreduces(self):
        return sum(name == "allreduce" for name, _ in self.collectives)

    def _record(self, name, result):
        self.collectives.append((name, int(result.nbytes)))

    def allreduce(self, array, op="sum", algorithm="auto"):
        self._record("allreduce", array)
        return self._comm.allreduce(array, op=op, algorithm=algorithm)

    def reduce_scatter(self, array, counts, out, op="sum"):
        self._record("reduce_scatter", out)
        return self._comm.reduce_scatter(array, counts, out, op=op)

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def _count(self, array, dest):
        self.sent.append((int(dest), int(np.asarray(to_numpy(array)).nbytes)))

    def send(self, array, dest, tag=0):
        self._count(array, dest)
        self._comm.mpi.Ssend(np.ascontiguousarray(to_numpy(array)), dest, tag)

    def sendrecv(self, send_array, dest, recv_array, source, sendtag=0, recvtag=0):
        self._count(send_array, dest)
        return self._comm.sendrecv(send_array, dest, recv_array, source, sendtag, recvtag)

    def isend(self, array, dest, tag=0):
        self._count(array, dest)
        return self._comm.isend(array, dest, tag)


def ring_pattern(sent, rank, size, length, itemsize):
    """Problems (a list of text, empty when none) of one rank's messages against the ring's
    pattern: 2(P-1) messages, each at most ceil(n/P) elements, all to one neighbour."""
    problems, block = [], ceil_div(length, size) * itemsize
    if len(sent) != 2 * (size - 1):
        problems.append(
            f"rank {rank} sent {len(sent)} messages; the ring sends 2(P-1) = {2 * (size - 1)} "
            f"(P-1 reduce-scatter steps, then P-1 allgather steps)"
        )
    large = [b for _, b in sent if b > block]
    if large:
        problems.append(
            f"rank {rank} sent a message of {max(large)} bytes; the ring sends blocks of "
            f"n/P elements (at most {block} bytes here, {length} elements on {size} ranks), "
            "not whole arrays"
        )
    targets = {d for d, _ in sent}
    if len(targets) > 1:
        problems.append(
            f"rank {rank} sent to ranks {sorted(targets)}; in a ring each rank sends to "
            "one neighbour only"
        )
    return problems


def _folded(sent, rank, size, whole):
    """For P not a power of two, the ranks above p2 (the largest power of two <= P) fold
    into the lower ones first and get the result back last. Returns (p2, the problems of a
    folded rank, the messages left for the power-of-two part): a rank >= p2 sends one
    whole array; a rank i < P - p2 also sends the result back to p2 + i at the end."""
    p2 = largest_power_of_two(size)
    if rank >= p2:
        if len(sent) != 1 or sent[0][1] != whole:
            return (
                p2,
                [
                    f"rank {rank} sent {len(sent)} messages; on {size} ranks rank {rank} folds its "
                    f"whole array into rank {rank - p2} and only receives the result back"
                ],
                [],
            )
        return p2, [], []
    if rank + p2 < size:
        if not sent or sent[-1] != (rank + p2, whole):
            return p2, [f"rank {rank} did not send the result back to rank {rank + p2} last"], []
        sent = sent[:-1]
    return p2, [], sent


def butterfly_pattern(sent, rank, size, length, itemsize):
    """Problems of one rank's messages against recursive doubling: log2 p2 exchanges of the
    whole array, each with a different partner (plus the folding of ``_folded``)."""
    whole = length * itemsize
    p2, problems, sent = _folded(sent, rank, size, whole)
    if problems or rank >= p2:
        return problems
    steps = ceil_log2(p2)
    if len(sent) != steps or any(b != whole for _, b in sent):
        problems.append(
            f"rank {rank} sent {len(sent)} messages of {sorted({b for _, b in sent})} bytes; "
            f"recursive doubling among {p2} ranks sends log2 P = {steps} whole arrays "
            f"({whole} bytes each)"
        )
    if len({d for d, _ in sent}) != len(sent):
        problems.append(f"rank {rank} sent twice to one partner; each step pairs rank XOR d")
    return problems


def rabenseifner_pattern(sent, rank, size, length, itemsize):
    """Problems of one rank's messages against recursive halving then doubling: 2 log2 p2
    messages and 2(p2-1)/p2 of the array in all, halves rounded (plus the folding of
    ``_folded``)."""
    p2, problems, sent = _folded(sent, rank, size, length * itemsize)
    if problems or rank >= p2:
        return problems
    steps = ceil_log2(p2)
    bound = (2 * (p2 - 1) * length // p2 + 2 * steps) * itemsize
    total = sum(b for _, b in sent)
    if len(sent) != 2 * steps:
        problems.append(
            f"rank {rank} sent {len(sent)} messages; halving then doubling among {p2} ranks "
            f"sends 2 log2 P = {2 * steps}"
        )
    if total > bound:
        problems.append(
            f"rank {rank} sent {total} bytes; halving then doubling sends about "
            f"2(P-1)/P of the array (at most {bound} bytes here), not whole arrays"
        )
    return problems
