"""Allreduce algorithms written on MPI point-to-point messages.

Each reduces a flat, contiguous array in place, for any number of ranks P and any
length n (0 and n < P included). The classic algorithms of Thakur, Rabenseifner &
Gropp (2005), costed in ``minidl/perf/allreduce_cost.py`` (Ben-Nun & Hoefler 2019, §2.5):

* ``ring``: reduce-scatter then allgather around a ring, P-1 steps each;
  bandwidth-optimal, linear latency term.
* ``butterfly``: recursive doubling; every rank exchanges the whole array log2(P) times.
* ``tree``: binomial reduce to rank 0, then binomial broadcast.
* ``rabenseifner``: recursive-halving reduce-scatter, recursive-doubling allgather;
  bandwidth-optimal with a logarithmic latency term.
* ``hierarchical``: ``Reduce`` within each node, ``ring`` among one leader per node,
  ``Bcast`` within the node: only one rank per node uses the network (SMP-aware).
* ``mpi``: the library's own ``Allreduce`` (``MPI_IN_PLACE``).

``REFERENCE_ALGORITHMS`` (``"ring_reference"``...) are the textbook versions, whole
blocks and no pipelining; importing ``minidl.reference`` registers them, and ``auto``
never picks them. The butterfly and Rabenseifner fold the ranks beyond the largest power
of two p2 <= P: rank p2 + i adds its array into rank i first and gets the result back.

Every rank ends with bit-identical results: ring, Rabenseifner and tree compute each
element on one rank and copy it; the butterfly adds the same two partial sums on both
partners, and IEEE addition is commutative. Messages go in segments of
``SEGMENT_BYTES`` (``Exchange``).
"""

import numpy as np

from minidl import backend
from minidl.dist.job import mpi_module
from minidl.intmath import largest_power_of_two
from minidl.perf.allreduce_cost import choose, choose_by_measurement, fit

ALLREDUCE_ALGORITHMS = ("mpi", "ring", "butterfly", "tree", "rabenseifner", "hierarchical")
REFERENCE_ALGORITHMS = {}  # "ring_reference": the textbook function (see register_reference)

SEGMENT_BYTES = 1 << 19  # host arrays; tuned with benchmarks/bench_allreduce.py --segments
AUTO_MODES = ("rule", "model", "measure")
RULE_THRESHOLD_BYTES = 4 << 20


class Scratch:
    """Receive buffers kept between calls, one per (array module, dtype): a fresh 100 MB
    buffer costs page faults worth a copy, so an allreduce never allocates on its hot path."""

    def __init__(self):
        self._buffers = {}

    def get(self, like, count):
        """A flat buffer of ``count`` elements of ``like``'s dtype and array module."""
        key = (type(like), like.dtype)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.size < count:
            buffer = backend.get_array_module(like).empty(max(count, 1), dtype=like.dtype)
            self._buffers[key] = buffer
        return buffer[:count]


def ready(array):
    """GPU kernels that wrote ``array`` must finish before MPI reads it."""
    if not isinstance(array, np.ndarray):
        backend.synchronize("cuda")


class Exchange:
    """The point-to-point steps of one allreduce on one rank, in segments of ``segment``
    elements: one received into a small scratch buffer is still in cache when it is added,
    and even a plain copy runs faster in segments than as one 100 MB message. Both sides
    cut a message by its length alone, so every ``Recv`` meets its ``Send``."""

    def __init__(self, comm, array, scratch):
        self.comm = comm
        # On a GPU every segment would cost a stream synchronisation: send whole blocks.
        on_device = not isinstance(array, np.ndarray)
        self.segment = array.size if on_device else max(1, SEGMENT_BYTES // array.itemsize)
        self.tmp = scratch.get(array, min(self.segment, array.size))
        self.nothing = array[:0]

    def _move(self, out, dest, part, source, add):
        """One segment: send ``out`` (may be empty) while receiving ``part`` (may be empty)."""
        into = self.tmp[: part.size] if add else part
        ready(out)
        if out.size and part.size:
            self.comm.Sendrecv(out, dest, 0, into, source, 0)
        elif out.size:
            self.comm.Send(out, dest)
        elif part.size:
            self.comm.Recv(into, source)
        if add and part.size:
            backend.get_array_module(part).add(part, into, out=part)

    def sendrecv(self, send_view, dest, recv_view, source, add=False):
        """Send ``send_view`` to ``dest`` while receiving ``recv_view`` from ``source``.
        With ``add``, ``recv_view += received``, and ``send_view`` may be ``recv_view``
        itself (each segment leaves before it is overwritten). Lengths may differ."""
        step = self.segment
        for start in range(0, max(send_view.size, recv_view.size), step):
            self._move(
                send_view[start : start + step], dest, recv_view[start : start + step], source, add
            )

    def reduce_then_forward(self, send_view, target, forward_into, dest, source, divide_by):
        """The last reduce step fused with the first copy step, segment by segment.
        Per segment: ``target += received`` while sending ``send_view``, divide it for
        a mean, then send it on (still in cache) while receiving ``forward_into``."""
        step = self.segment
        for start in range(0, max(send_view.size, target.size, forward_into.size), step):
            part = target[start : start + step]
            self._move(send_view[start : start + step], dest, part, source, add=True)
            divide_in_place(part, divide_by)
            self._move(part, dest, forward_into[start : start + step], source, add=False)

    def send(self, view, dest):
        self.sendrecv(view, dest, self.nothing, None)

    def recv(self, view, source, add=False):
        self.sendrecv(self.nothing, None, view, source, add)


def divide_in_place(view, divide_by):
    """The mean's division (None: a sum), done where each element is final, once."""
    if divide_by is not None and view.size:
        view /= divide_by


def _block_bounds(count, parts):
    """Start offsets of ``parts`` nearly equal blocks of ``count`` elements (plus the end)."""
    return [i * count // parts for i in range(parts + 1)]


def _fold_in(ex, x, rank, size):
    """Fold ranks >= p2 into ranks < p2; returns p2 and whether this rank goes on."""
    p2 = largest_power_of_two(size)
    if rank >= p2:
        ex.send(x, rank - p2)
        return p2, False
    if rank + p2 < size:
        ex.recv(x, rank + p2, add=True)
    return p2, True


def _fold_out(ex, x, rank, size, p2):
    """Give the folded ranks their result."""
    if rank >= p2:
        ex.recv(x, rank - p2)
    elif rank + p2 < size:
        ex.send(x, rank + p2)


def ring(comm, x, ex, divide_by=None):
    """Pipelined ring: reduce-scatter then allgather, 2(P-1) steps of n/P elements.

    After reduce-scatter step s, rank r's block (r-s-1) mod P holds s+2
    contributions; after P-1 steps rank r owns the finished block (r+1) mod P,
    which the allgather passes around the ring. The last reduce step and the
    first allgather step run fused, segment by segment.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    bounds = _block_bounds(x.size, size)

    def block(i):
        i %= size
        return x[bounds[i] : bounds[i + 1]]

    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 2):
        ex.sendrecv(block(rank - step), right, block(rank - step - 1), left, add=True)
    # reduce-scatter step P-2 completes block r+1, which allgather step 0 sends on
    ex.reduce_then_forward(block(rank + 2), block(rank + 1), block(rank), right, left, divide_by)
    for step in range(1, size - 1):
        ex.sendrecv(block(rank + 1 - step), right, block(rank - step), left)


def butterfly(comm, x, ex, divide_by=None):
    """Recursive doubling: log2(p2) whole-array exchanges with partners rank XOR 2^k."""
    rank, size = comm.Get_rank(), comm.Get_size()
    p2, active = _fold_in(ex, x, rank, size)
    if active:
        distance = 1
        while distance < p2:
            partner = rank ^ distance
            ex.sendrecv(x, partner, x, partner, add=True)
            distance <<= 1
        divide_in_place(x, divide_by)
    _fold_out(ex, x, rank, size, p2)


def tree(comm, x, ex, divide_by=None):
    """Binomial reduce to rank 0, then binomial broadcast: 2 ceil(log2 P) rounds. Rank r's
    parent is r minus its lowest set bit; rank 0 finishes the sum, the others copy it."""
    rank, size = comm.Get_rank(), comm.Get_size()
    distance = 1
    while distance < size:
        if rank & distance:
            ex.send(x, rank - distance)
            break
        if rank + distance < size:
            ex.recv(x, rank + distance, add=True)
        distance <<= 1
    lowest_bit = rank & -rank
    if rank == 0:
        divide_in_place(x, divide_by)
        child = largest_power_of_two(size - 1) if size > 1 else 0
    else:
        ex.recv(x, rank - lowest_bit)
        child = lowest_bit >> 1
    while child:
        if rank + child < size:
            ex.send(x, rank + child)
        child >>= 1


def rabenseifner(comm, x, ex, divide_by=None):
    """Recursive-halving reduce-scatter, then recursive-doubling allgather.

    At distance d (p2/2, p2/4, ..., 1) partners r and r XOR d share a
    segment; each keeps one half, sends the other and adds the partner's
    copy of its half. The allgather replays the halvings backwards; its
    first step is fused with the last halving (same partner, same halves).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    p2, active = _fold_in(ex, x, rank, size)
    if active:
        lo, hi = 0, x.size
        halvings = []
        distance = p2 >> 1
        while distance:
            partner = rank ^ distance
            mid = lo + (hi - lo) // 2
            keep, give = ((mid, hi), (lo, mid)) if rank & distance else ((lo, mid), (mid, hi))
            kept, given = x[keep[0] : keep[1]], x[give[0] : give[1]]
            halvings.append((partner, lo, hi))
            if distance > 1:
                ex.sendrecv(given, partner, kept, partner, add=True)
            else:  # the last halving and the first doubling pair the same ranks
                ex.reduce_then_forward(given, kept, given, partner, partner, divide_by)
            lo, hi = keep
            distance >>= 1
        _, lo, hi = halvings.pop()  # the fused step already gathered the last halving
        for partner, parent_lo, parent_hi in reversed(halvings):
            other = (parent_lo, lo) if lo > parent_lo else (hi, parent_hi)
            ex.sendrecv(x[lo:hi], partner, x[other[0] : other[1]], partner)
            lo, hi = parent_lo, parent_hi
    _fold_out(ex, x, rank, size, p2)


def mpi_native(comm, x, ex, divide_by=None):
    """The MPI library's ``Allreduce`` with ``MPI_IN_PLACE`` (its own algorithm choice)."""
    MPI = mpi_module()
    ready(x)
    comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
    divide_in_place(x, divide_by)


_KEYVAL = []  # the MPI attribute key under which a communicator keeps its NodeSplit


class NodeSplit:
    """``comm`` split by node: ``node`` (this node's ranks), ``leaders`` (node rank 0 of every
    node; None on other ranks), ``nodes`` and ``largest`` (the most ranks on one node)."""

    def __init__(self, comm):
        MPI = mpi_module()
        self.node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        leader = self.node.Get_rank() == 0
        split = comm.Split(0 if leader else MPI.UNDEFINED, key=comm.Get_rank())
        self.leaders = split if leader else None
        self.nodes = comm.allreduce(int(leader))
        self.largest = comm.allreduce(self.node.Get_size(), op=MPI.MAX)
        self.scratch = Scratch()


def node_split(comm):
    """The cached ``NodeSplit`` of the mpi4py communicator ``comm`` (collective the first time)."""
    MPI = mpi_module()
    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval())
    split = comm.Get_attr(_KEYVAL[0])
    if split is None:
        split = NodeSplit(comm)
        comm.Set_attr(_KEYVAL[0], split)
    return split


def hierarchical(comm, x, ex=None, divide_by=None):
    """By node (module doc): every rank ends with its leader's bits, the leaders with the
    ring's. The node and leader communicators are split once and cached on ``comm``."""
    MPI = mpi_module()
    split = node_split(comm)
    ready(x)
    if split.node.Get_size() > 1:
        leader = split.leaders is not None
        split.node.Reduce(MPI.IN_PLACE if leader else x, x if leader else None, MPI.SUM, root=0)
    if split.leaders is not None:
        if split.leaders.Get_size() > 1:
            ring(split.leaders, x, Exchange(split.leaders, x, split.scratch), divide_by)
        else:
            divide_in_place(x, divide_by)
    if split.node.Get_size() > 1:
        split.node.Bcast(x, root=0)


_IMPLEMENTATIONS = {
    "mpi": mpi_native,
    "ring": ring,
    "butterfly": butterfly,
    "tree": tree,
    "rabenseifner": rabenseifner,
    "hierarchical": hierarchical,
}


class PointToPoint:
    """``Communicator``'s ``rank``, ``size``, ``send``, ``recv`` and ``sendrecv`` on an mpi4py
    communicator: what the reference algorithms are written against."""

    def __init__(self, mpi_comm):
        self.mpi = mpi_comm
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()

    def send(self, array, dest, tag=0):
        ready(array)
        self.mpi.Send(array, dest, tag)

    def recv(self, array, source, tag=0):
        self.mpi.Recv(array, source, tag)
        return array

    def sendrecv(self, send_array, dest, recv_array, source, sendtag=0, recvtag=0):
        ready(send_array)
        self.mpi.Sendrecv(send_array, dest, sendtag, recv_array, source, recvtag)
        return recv_array


def register_reference(name, function):
    """Make ``algorithm=name`` run ``function(comm, x)``, a textbook allreduce that sums the
    flat ``x`` over ``comm`` (a ``PointToPoint``) in place; the mean's division follows it."""
    if not name.endswith("_reference"):
        raise ValueError(
            f"register_reference: {name!r} must end in '_reference' (the tuned "
            "algorithms own the plain names)"
        )
    REFERENCE_ALGORITHMS[name] = function


def check_algorithm(algorithm, allow_auto=True):
    """Return ``algorithm`` if known, else raise an error that lists the choices."""
    choices = ALLREDUCE_ALGORITHMS + tuple(REFERENCE_ALGORITHMS) + (("auto",) if allow_auto else ())
    if algorithm not in choices:
        unregistered = ""
        if str(algorithm).endswith("_reference"):
            unregistered = "; to run a textbook algorithm, `import minidl.reference` first"
            unregistered += " (which registers them)"
        raise ValueError(
            f"allreduce: unknown algorithm {algorithm!r}; "
            f"choose one of {', '.join(choices)}{unregistered}"
        )
    return algorithm


def allreduce(comm, array, algorithm, divide_by, scratch):
    """Sum (then divide by ``divide_by`` unless None) ``array`` over ``comm``, an mpi4py
    communicator, in place; ``array``: C-contiguous, on a GPU only with a CUDA-aware MPI."""
    check_algorithm(algorithm, allow_auto=False)
    flat = array.reshape(-1)
    if flat.size == 0 or comm.Get_size() == 1:
        divide_in_place(flat, divide_by)
    elif algorithm in REFERENCE_ALGORITHMS:
        REFERENCE_ALGORITHMS[algorithm](PointToPoint(comm), flat)
        divide_in_place(flat, divide_by)
    else:
        _IMPLEMENTATIONS[algorithm](comm, flat, Exchange(comm, flat, scratch), divide_by)
    return array


def choose_by_rule(nbytes, nodes=1, ranks_per_node=1):
    """The fixed pick of ``algorithm="auto"``: the MPI library's own below 4 MiB, ring above,
    ``hierarchical`` above when the ranks span ``nodes`` > 1 with several on a node
    (``ranks_per_node``: the most on one). Unlike a timed pick it never changes between runs.

    Measured on two ranks of one machine (benchmarks/RESULTS.md): MPICH's allreduce is the
    fastest below ~4 MB, the ring above it, at 0.64x MPICH's time for AlexNet's 244 MB.
    """
    if nbytes < RULE_THRESHOLD_BYTES:
        return "mpi"
    return "hierarchical" if nodes > 1 and ranks_per_node > 1 else "ring"


class AutoChoice:
    """What ``algorithm="auto"`` runs on one communicator, in mode ``mode`` (``AUTO_MODES``).

    ``"rule"`` (default): ``choose_by_rule``, so a seeded run gives the same bits every time.
    ``"measure"``: ``choose_by_measurement`` once per size, dtype and device. ``"model"``:
    ``choose`` with parameters ``fit`` once (never the library's own algorithm, which it has
    no formula for). The timed modes may round differently from run to run; every rank gets
    the same pick. ``segment_bytes``: the algorithms' pipeline segment (for ``fit``).
    """

    def __init__(self, mode, segment_bytes):
        self.mode = mode
        self.segment_bytes = segment_bytes
        self._params = None
        self._measured = {}

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, mode):
        if mode not in AUTO_MODES:
            raise ValueError(f"auto={mode!r}: choose one of {', '.join(AUTO_MODES)}")
        self._mode = mode

    def choose(self, comm, array):
        """The algorithm for an allreduce of ``array`` over ``comm`` (collective in "measure"
        and "model" modes the first time)."""
        if comm.size == 1:
            return "mpi"
        if self.mode == "rule":
            if array.nbytes < RULE_THRESHOLD_BYTES:  # no need to ask where the ranks are
                return "mpi"
            return choose_by_rule(array.nbytes, *comm.node_layout())
        if self.mode == "measure":
            key = (array.nbytes, array.dtype.str, backend.device_of(array))
            if key not in self._measured:
                self._measured[key] = choose_by_measurement(comm, array)
            return self._measured[key]
        return choose(array.nbytes, comm.size, self.cost_params(comm))

    def cost_params(self, comm):
        """The ``CostParams`` fitted on ``comm`` (collective the first time)."""
        if self._params is None:
            self._params = fit(comm, self.segment_bytes)
        return self._params
