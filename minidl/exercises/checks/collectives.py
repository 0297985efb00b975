"""Checks of the collectives exercises (6.x): allreduce from point-to-point messages.

Each check runs one algorithm of ``minidl/reference/dist/allreduce.py`` on
4 MPI ranks (and 3: one fewer) and compares it with oracles that run no exercise region:
the exact sum of every rank's seeded random input (each rank rebuilds all
ranks' inputs from the seed), the rank idiom (rank r holds r everywhere,
so the sum is P(P-1)/2 exactly), and minidl's tuned algorithm of the same
name. Every rank must also end with the same bits.

The algorithms run over a ``PointToPointComm``: a blocking send is
synchronous, so an exchange in an unsafe order deadlocks at every size (the
grader names the line it waits on); every library collective the code calls
(``comm.allreduce``, ``comm.allgather``, ``comm.mpi``, ...) is a failure, since
the exercise is to build one; and the messages are held to the algorithm's
pattern. Each check runs on the job's ranks and on one rank fewer (split
off), so that powers of two and other counts both run at home. The
hierarchical allreduce runs on emulated node layouts of two nodes or more,
so that the exchange among the node leaders runs too.
"""

import hashlib

import numpy as np

from minidl.exercises import ExerciseFailure, exercise, expect_close, expect_true
from minidl.exercises.strict_comm import (
    StrictComm,
    butterfly_pattern,
    rabenseifner_pattern,
    ring_pattern,
)
from minidl.intmath import ceil_log2
from minidl.reference.dist import allreduce

PATH = "minidl/reference/dist/allreduce.py"
SEED = 6
DTYPES = ("float64", "float32", "int64")


def rank_input(rank, length, dtype, seed=SEED):
    """Rank ``rank``'s input: the same on every rank that builds it, so each can form the oracle."""
    rng = np.random.default_rng([seed, rank, length])
    if np.dtype(dtype).kind == "i":
        return rng.integers(-1000, 1000, length).astype(dtype)
    return rng.standard_normal(length).astype(dtype)


def lengths(size):
    """Lengths with nothing, fewer elements than ranks, uneven blocks, and a longer array."""
    return sorted({0, 1, size - 1, size + 1, 13, 1000})


def exact_sum(inputs):
    """The float64 sum of the ranks' inputs, and the rounding error a P-term sum may carry."""
    exact = np.sum([a.astype(np.float64) for a in inputs], axis=0)
    dtype = inputs[0].dtype
    if dtype.kind == "i" or exact.size == 0:
        return exact, 0.0
    magnitude = float(np.max(np.sum([np.abs(a.astype(np.float64)) for a in inputs], axis=0)))
    return exact, len(inputs) * float(np.finfo(dtype).eps) * magnitude


def digest(array):
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()


def expect_on_every_rank(comm, verify, label=True):
    """Run ``verify()`` (local comparisons, no messages) on every rank; all raise the first failure.

    A wrong result may show on some ranks only, and a rank that raised alone
    would leave the others waiting for its next message; so every rank
    shares its verdict, and all raise the lowest failing rank's (its text
    starting with "rank r of P: " unless ``label`` is False).
    """
    try:
        verify()
        mine = None
    except ExerciseFailure as failure:
        mine = (failure.what, failure.expected, failure.got, failure.where, failure.detail)
    for rank, verdict in enumerate(comm.allgather_object(mine)):
        if verdict is not None:
            what, expected, got, where, detail = verdict
            prefix = f"rank {rank} of {comm.size}: " if label else ""
            raise ExerciseFailure(prefix + what, expected, got, where, detail)


def on_first_ranks(comm, count, run):
    """``run(group)`` on a group of the first ``count`` ranks of ``comm`` (split off; the others
    wait); every rank of ``comm`` raises the group's failure."""
    group = comm.split(0 if comm.rank < count else 1, comm.rank)
    expect_on_every_rank(comm, lambda: run(group) if comm.rank < count else None, label=False)


# what an allreduce built from messages may use of the communicator
POINT_TO_POINT = frozenset(
    {"rank", "size", "send", "recv", "sendrecv", "isend", "irecv", "wait_all", "wait_any"}
    | {"test_all", "test_some", "barrier"}
)


class PointToPointComm(StrictComm):
    """``StrictComm`` that also records the name of every other thing the code takes from the
    communicator (``library``: ``allgather``, ``bcast``, ``mpi``, ``split``, ...)."""

    def __init__(self, comm):
        super().__init__(comm)
        self.library = []

    def __getattr__(self, name):
        if name not in POINT_TO_POINT:
            self.library.append(name)
        return super().__getattr__(name)

    def library_calls(self):
        """The names of the library's collectives and other calls used, each once, in order."""
        return list(dict.fromkeys([name for name, _ in self.collectives] + self.library))


def check_allreduce(comm, algorithm, tuned, pattern=None, sizes=None, seed=SEED):
    """Compare ``algorithm(comm, x)`` with the oracles for every length (default
    ``lengths(P)``) and dtype, on every rank (over a ``PointToPointComm``; ``pattern``: a
    function of the messages sent that lists problems)."""
    rank, size = comm.rank, comm.size
    comparisons, cases, digests, problems = [], [], [], []
    strict = PointToPointComm(comm)
    sizes = lengths(size) if sizes is None else sizes
    for length in sizes:
        x = np.full(length, rank, dtype="float64")
        strict.sent.clear()
        algorithm(strict, x)
        if pattern is not None and length >= size and not problems:
            problems += pattern(strict.sent, rank, size, length, x.itemsize)
        comparisons.append(
            (
                f"each rank holds its rank, {length} elements on {size} ranks: the sum is P(P-1)/2",
                x,
                np.full(length, size * (size - 1) / 2),
                0.0,
            )
        )
    for length in sizes:
        for dtype in DTYPES:
            inputs = [rank_input(r, length, dtype, seed) for r in range(size)]
            exact, tolerance = exact_sum(inputs)
            x = inputs[rank].copy()
            algorithm(strict, x)
            y = comm.allreduce(inputs[rank].copy(), "sum", algorithm=tuned)
            case = f"{length} random {dtype} elements on {size} ranks"
            comparisons += [
                (f"sum of {case}", x, exact, tolerance),
                (f"sum of {case}, against minidl's tuned {tuned!r}", x, y, 2 * tolerance),
            ]
            cases.append(case)
            digests.append(digest(x))

    library = strict.library_calls()

    def verify():
        expect_true(
            f"{tuned!r} is built from messages: no collective of the library",
            not library,
            detail=f"rank {rank} used comm.{', comm.'.join(library)}; send and receive the "
            "blocks yourself with comm.send, comm.recv and comm.sendrecv",
        )
        expect_true(
            f"the messages of {tuned!r} follow its pattern", not problems, "; ".join(problems)
        )
        for what, got, expected, tolerance in comparisons:
            expect_close(what, got, expected, rtol=0.0, atol=tolerance)

    expect_on_every_rank(comm, verify)
    # every rank sees the same digests: the same verdict everywhere
    for case, per_rank in zip(cases, zip(*comm.allgather_object(digests))):
        differ = [r for r, d in enumerate(per_rank) if d != per_rank[0]]
        expect_true(
            f"every rank ends with the same bits ({case})",
            not differ,
            detail=f"ranks {differ} differ from rank 0; add each element on one rank "
            "and copy it to the others",
        )


TIMEOUT_S = 20.0  # a right answer takes about 2 s; a deadlock is reported after this


def on_nodes(layout):
    """``allreduce.hierarchical`` with ``nodes_of`` giving ``layout`` (lists of ranks, each
    node's lowest first): emulated nodes, so that a job on one machine has several."""

    def hierarchical(comm, x):
        real = allreduce.nodes_of
        allreduce.nodes_of = lambda _comm: [list(node) for node in layout]
        try:
            return allreduce.hierarchical(comm, x)
        finally:
            allreduce.nodes_of = real

    return hierarchical


def hierarchical_pattern(layout):
    """The problems of one rank's messages against the hierarchical pattern on ``layout``: a
    rank that is not its node's leader sends its whole array to its leader once and nothing
    else; a leader sends to other nodes only to their leaders, and to each of them at least
    once when there are several nodes (any exchange among leaders does)."""

    def pattern(sent, rank, size, length, itemsize):
        node = next(node for node in layout if rank in node)
        leaders = [other[0] for other in layout]
        if rank != node[0]:
            if sent == [(node[0], length * itemsize)]:
                return []
            return [
                f"rank {rank} sent {len(sent)} messages to ranks {sorted({d for d, _ in sent})}; "
                f"on nodes {layout} it sends its whole array to its node's leader, rank "
                f"{node[0]}, once, and receives the total from it"
            ]
        problems = []
        strangers = sorted({d for d, _ in sent if d not in node and d not in leaders})
        if strangers:
            problems.append(
                f"leader {rank} sent to ranks {strangers} of other nodes; across nodes only the "
                f"leaders {leaders} talk"
            )
        if len(layout) > 1 and not {d for d, _ in sent} & (set(leaders) - {rank}):
            problems.append(
                f"leader {rank} sent nothing to the other leaders {sorted(set(leaders) - {rank})} "
                f"on nodes {layout}: the node sums must be exchanged among the leaders"
            )
        return problems

    return pattern


def allreduce_check(name):
    """The check of ``allreduce.<name>``: on the job's P ranks and on the first P - 1."""

    def check(comm):
        algorithm, pattern = getattr(allreduce, name), PATTERNS.get(name)
        check_allreduce(comm, algorithm, name, pattern)
        if comm.size > 2:
            on_first_ranks(
                comm, comm.size - 1, lambda group: check_allreduce(group, algorithm, name, pattern)
            )

    return check


def layouts(size):
    """Node layouts of ``size`` ranks: two nodes of consecutive ranks, two of alternate
    ranks, one node (each node's ranks lowest first, nodes by their lowest rank)."""
    ranks = list(range(size))
    found = [[ranks[: size // 2], ranks[size // 2 :]], [ranks[0::2], ranks[1::2]], [ranks]]
    return [layout for i, layout in enumerate(found) if all(layout) and layout not in found[:i]]


def check_hierarchical(comm):
    """The hierarchical allreduce on three node layouts of the job's ranks, and on one of the
    first P - 1."""

    def run(group, count):
        for layout in layouts(group.size)[:count]:
            check_allreduce(
                group, on_nodes(layout), "hierarchical", hierarchical_pattern(layout), SHORT
            )

    run(comm, 3)
    if comm.size > 2:
        on_first_ranks(comm, comm.size - 1, lambda group: run(group, 1))


def tree_pattern(sent, rank, size, length, itemsize):
    """Problems of one rank's messages against the binomial tree: whole arrays, at most
    ceil(log2 P) from rank 0 (its children) and one more from any other rank (to its
    parent); a flat gather to rank 0 and back sends P - 1 from rank 0."""
    most = ceil_log2(size) + (rank != 0)
    whole = length * itemsize
    if len(sent) <= most and all(b == whole for _, b in sent):
        return []
    return [
        f"rank {rank} sent {len(sent)} messages of {sorted({b for _, b in sent})} bytes; in a "
        f"binomial tree of {size} ranks it sends at most {most} whole arrays ({whole} bytes), "
        "one to its parent and one to each child"
    ]


SHORT = (0, 1, 5, 13, 1000)  # lengths of each layout of the hierarchical check
PATTERNS = {
    "ring": ring_pattern,
    "butterfly": butterfly_pattern,
    "tree": tree_pattern,
    "rabenseifner": rabenseifner_pattern,
}


def register(exercise_id, name, title, ranks, hint):
    """Register the check of exercise ``exercise_id``: ``allreduce.<name>`` against the oracles."""
    check = check_hierarchical if name == "hierarchical" else allreduce_check(name)
    check.__name__ = check.__qualname__ = f"check_{name}"
    exercise(exercise_id, title, path=PATH, hint=hint, ranks=ranks, timeout=TIMEOUT_S)(check)


register(
    "6.1",
    "ring",
    "Ring allreduce: reduce-scatter, then allgather",
    ranks=4,
    hint="in reduce-scatter step s send block r-s to the right and add block r-s-1 from "
    "the left; then pass the finished blocks around once more; send and receive in one "
    "call (comm.sendrecv), since every rank sends at the same time",
)
register(
    "6.2",
    "butterfly",
    "Butterfly allreduce: recursive doubling",
    ranks=4,
    hint="at distances 1, 2, 4, ... below p2 exchange the whole array with rank XOR "
    "distance and add what arrives",
)
register(
    "6.3",
    "tree",
    "Binomial tree allreduce: reduce to rank 0, then broadcast",
    ranks=4,
    hint="reduce: at distance d, ranks with r mod 2d == d send to r - d; broadcast: run "
    "the distances backwards with the messages going the other way",
)
register(
    "6.4",
    "rabenseifner",
    "Rabenseifner allreduce: recursive halving, then doubling",
    ranks=4,
    hint="halve the segment you share with rank XOR d (d = p2/2 ... 1), keep your "
    "half and add the partner's copy of it; then replay the exchanges "
    "backwards as copies",
)
register(
    "6.5",
    "hierarchical",
    "Hierarchical allreduce: within the node, among node leaders, back within the node",
    ranks=4,
    hint="non-leaders send their array to the node's leader and receive the result; each "
    "leader adds what arrives, swaps node sums with the other leaders, adds them in node "
    "order (so all leaders get the same bits), and sends the total back",
)
