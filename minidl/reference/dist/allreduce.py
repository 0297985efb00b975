"""Allreduce from point-to-point messages: ring, butterfly, binomial tree, Rabenseifner and
hierarchical (by node).

P ranks each hold an array x_r of n elements; allreduce leaves on every rank

    y = x_0 + x_1 + ... + x_(P-1)

Each function below sums a flat NumPy/CuPy array ``x`` over ``comm``'s ranks
in place (and returns it) using only ``comm.send``, ``comm.recv`` and
``comm.sendrecv`` on whole blocks (``hierarchical`` also asks MPI, through
``comm.mpi``, which ranks share a node); the mean is the sum divided by P. Their
alpha-beta-gamma times are in ``minidl/reference/perf/allreduce_cost.py``
(Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep
Learning, §2.5).

The ring follows Patarasuk & Yuan 2009 (Bandwidth Optimal All-reduce
Algorithms for Clusters of Workstations); the butterfly, the binomial tree
and Rabenseifner's algorithm follow Thakur, Rabenseifner & Gropp 2005
(Optimization of Collective Communication Operations in MPICH).

The ring and the tree work for any P. The butterfly and Rabenseifner pair
rank r with r XOR 2^k, which needs a power of two: with p2 the largest power
of two <= P, rank p2 + i first *folds* its array into rank i (``fold_in``),
the p2 lower ranks run the algorithm, and rank i sends the result back to
rank p2 + i (``fold_out``). This costs two extra messages of the whole array.

Every element of y is added up on one rank and copied to the others, or (the
butterfly) added in the same pairs on both partners, so all ranks hold the
same bits. ``comm.allreduce(x, algorithm="ring_reference")`` runs these
functions (``minidl.reference.dist`` registers them).

The exercises build each allreduce from messages: their checks fail a region that calls a
collective of the library (``comm.allreduce``, ``comm.allgather``, ``comm.bcast``, ``comm.mpi``,
...), hold the messages to the algorithm's pattern, and run on a power of two ranks and on
another count. A check's sends return only once their receive has started, so an order that
relies on MPI's buffering deadlocks there. The hierarchical check lays the ranks out on
emulated nodes (``nodes_of`` gives two nodes or more), so the leaders' exchange runs.
"""

from minidl.backend import get_array_module


def ring(comm, x):
    """Ring allreduce: P-1 reduce-scatter steps, then P-1 allgather steps, on blocks of n/P.

    x is cut into P blocks. At reduce-scatter step s rank r sends block
    r-s to its right neighbour and adds the block r-s-1 that arrives from its
    left; after P-1 steps rank r holds the full sum of block r+1. The
    allgather then passes the finished blocks around the ring (block indices
    modulo P).
    """
    xp = get_array_module(x)
    rank, size = comm.rank, comm.size
    blocks = xp.array_split(x, size)  # views of x; sizes differ by at most one
    right, left = (rank + 1) % size, (rank - 1) % size
    # BEGIN EXERCISE 6.1
    for step in range(size - 1):
        target = blocks[(rank - step - 1) % size]
        received = xp.empty_like(target)
        comm.sendrecv(blocks[(rank - step) % size], right, received, left)
        target += received
    for step in range(size - 1):
        comm.sendrecv(blocks[(rank + 1 - step) % size], right, blocks[(rank - step) % size], left)
    # END EXERCISE 6.1
    return x


def fold_in(comm, x):
    """Fold the ranks above the largest power of two p2 <= P into the lower ones; returns p2.

    Rank p2 + i sends its array to rank i, which adds it to its own.
    """
    rank, size = comm.rank, comm.size
    p2 = 1
    while 2 * p2 <= size:
        p2 *= 2
    if rank >= p2:
        comm.send(x, rank - p2)
    elif rank + p2 < size:
        received = get_array_module(x).empty_like(x)
        comm.recv(received, rank + p2)
        x += received
    return p2


def fold_out(comm, x, p2):
    """Send the result of rank i back to the folded rank p2 + i."""
    rank, size = comm.rank, comm.size
    if rank >= p2:
        comm.recv(x, rank - p2)
    elif rank + p2 < size:
        comm.send(x, rank + p2)


def butterfly(comm, x):
    """Recursive doubling: log2(P) exchanges of the whole array with partner r XOR 2^k.

    After the exchange at distance d = 2^k, rank r holds the sum over the 2d
    ranks that agree with r in every bit above k.
    """
    xp = get_array_module(x)
    p2 = fold_in(comm, x)
    # BEGIN EXERCISE 6.2
    if comm.rank < p2:
        received = xp.empty_like(x)
        distance = 1
        while distance < p2:
            partner = comm.rank ^ distance
            comm.sendrecv(x, partner, received, partner)
            x += received
            distance *= 2
    # END EXERCISE 6.2
    fold_out(comm, x, p2)
    return x


def tree(comm, x):
    """Binomial tree: reduce to rank 0, then broadcast back down the same tree.

    Reduce: at distance d = 1, 2, 4, ... rank r with r mod 2d = d sends its
    partial sum to r - d, which adds it; rank 0 ends with y. Broadcast: the
    same steps in reverse order, each message going the other way.
    ceil(log2 P) rounds each.
    """
    xp = get_array_module(x)
    rank, size = comm.rank, comm.size
    received = xp.empty_like(x)
    # BEGIN EXERCISE 6.3
    distance = 1
    while distance < size:
        if rank % (2 * distance) == distance:
            comm.send(x, rank - distance)
        elif rank % (2 * distance) == 0 and rank + distance < size:
            comm.recv(received, rank + distance)
            x += received
        distance *= 2
    while distance > 1:
        distance //= 2
        if rank % (2 * distance) == 0 and rank + distance < size:
            comm.send(x, rank + distance)
        elif rank % (2 * distance) == distance:
            comm.recv(x, rank - distance)
    # END EXERCISE 6.3
    return x


def rabenseifner(comm, x):
    """Reduce-scatter by recursive halving, then allgather by recursive doubling.

    Halving: at distance d = P/2, P/4, ..., 1 rank r and its partner r XOR d
    share a segment [lo, hi); the rank with bit d clear keeps the lower half,
    the other the upper; each sends the half it gives away and adds the
    partner's copy of the half it keeps. After log2(P) halvings rank r holds
    about n/P finished elements. Doubling: the same exchanges in reverse
    order, each rank sending its finished segment and receiving the partner's.
    """
    xp = get_array_module(x)
    p2 = fold_in(comm, x)
    # BEGIN EXERCISE 6.4
    if comm.rank < p2:
        lo, hi = 0, x.size
        exchanges = []
        distance = p2 // 2
        while distance >= 1:
            partner = comm.rank ^ distance
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if comm.rank & distance else ((lo, mid), (mid, hi))
            received = xp.empty(keep[1] - keep[0], dtype=x.dtype)
            comm.sendrecv(x[give[0] : give[1]], partner, received, partner)
            x[keep[0] : keep[1]] += received
            exchanges.append((partner, keep, give))
            lo, hi = keep
            distance //= 2
        for partner, keep, give in reversed(exchanges):
            comm.sendrecv(x[keep[0] : keep[1]], partner, x[give[0] : give[1]], partner)
    # END EXERCISE 6.4
    fold_out(comm, x, p2)
    return x


def nodes_of(comm):
    """The ranks of each node, lowest first: the ranks that share memory (MPI's
    ``COMM_TYPE_SHARED``), as lists ordered by their lowest rank."""
    from mpi4py import MPI

    node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    lowest = node.allreduce(comm.rank, op=MPI.MIN)
    node.Free()
    lowest_of = comm.mpi.allgather(lowest)
    return [
        [r for r in range(comm.size) if lowest_of[r] == first] for first in sorted(set(lowest_of))
    ]


def hierarchical(comm, x):
    """Two levels: sum on each node's leader, combine the leaders' sums, copy back in the node.

    The leader of a node is its lowest rank. Messages within a node go
    through shared memory; only the N leaders talk over the network. Here
    they simply swap node sums in N-1 shifts (at shift s leader i sends to
    i+s and receives from i-s) and each adds the N sums in node order, so all
    agree bit for bit; the tuned version runs a ring among them instead,
    2 (N-1)/N of the array per leader rather than 2 (P-1)/P from all P ranks.
    """
    xp = get_array_module(x)
    nodes = nodes_of(comm)
    leaders = [node[0] for node in nodes]
    mine = next(node for node in nodes if comm.rank in node)
    # BEGIN EXERCISE 6.5
    if comm.rank != mine[0]:
        comm.send(x, mine[0])
        comm.recv(x, mine[0])
        return x
    received = xp.empty_like(x)
    for rank in mine[1:]:
        comm.recv(received, rank)
        x += received
    i, n = leaders.index(comm.rank), len(leaders)
    sums = [None] * n
    sums[i] = x.copy()
    for shift in range(1, n):
        sums[(i - shift) % n] = xp.empty_like(x)
        comm.sendrecv(
            sums[i], leaders[(i + shift) % n], sums[(i - shift) % n], leaders[(i - shift) % n]
        )
    x[...] = sums[0]
    for node_sum in sums[1:]:
        x += node_sum
    for rank in mine[1:]:
        comm.send(x, rank)
    # END EXERCISE 6.5
    return x
