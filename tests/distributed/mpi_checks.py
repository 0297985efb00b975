"""Checks that run under ``mpiexec -n N python mpi_checks.py CHECK``; launched by the tests.

Each check asserts on every rank; a failed assertion aborts the whole job
through minidl's exception hook (non-zero exit). A passing rank prints
``CHECK <name> OK rank <r>``, which the test counts.
"""

import hashlib
import sys

import numpy as np

import minidl.dist as dist
from minidl import backend
from minidl.dist import collectives

ALGORITHMS = dist.ALLREDUCE_ALGORITHMS + ("auto",)


def lengths(size):
    """0, 1, fewer than P, P, primes, and lengths of several pipeline segments."""
    return sorted({0, 1, 2, size - 1, size, size + 1, 3, 5, 7, 13, 31, 97, 1009, 65537, 300007})


def rank_array(seed, rank, length, dtype):
    """Rank ``rank``'s input: reproducible on every rank, so each can build the oracle."""
    rng = np.random.default_rng([seed, rank, length])
    if np.dtype(dtype).kind == "i":
        return rng.integers(-1000, 1000, length).astype(dtype)
    return rng.standard_normal(length).astype(dtype)


def digests(comm, array):
    """Every rank's SHA-1 of ``array``'s bytes, in rank order."""
    return comm.allgather_object(hashlib.sha1(backend.to_numpy(array).tobytes()).hexdigest())


def check_rank_idiom(comm, xp=np):
    """The rank idiom: each rank holds its rank; mean -> (P-1)/2, sum -> P(P-1)/2, exactly."""
    size = comm.size
    for algorithm in ALGORITHMS:
        for length in (0, 1, size - 1, 5, 1000):
            for dtype in ("float32", "float64"):
                x = xp.full(length, comm.rank, dtype=dtype)
                assert comm.allreduce(x, "mean", algorithm) is x
                assert bool((x == (size - 1) / 2).all()), (algorithm, length, dtype, x[:5])
            x = xp.full((length, 2), comm.rank, dtype="int64")
            comm.allreduce(x, "sum", algorithm)
            assert bool((x == size * (size - 1) // 2).all()), (algorithm, length, x[:5])


def check_random_sums(comm, xp=np):
    """Every algorithm equals the NumPy sum (and mean) of all ranks' random arrays.

    Runs twice: with the default pipeline segment, and with a 24-byte segment
    so that blocks split into unequal numbers of segments.
    """
    size = comm.size
    default_segment = collectives.SEGMENT_BYTES
    for segment in (default_segment, 24):
        collectives.SEGMENT_BYTES = segment
        for algorithm in ALGORITHMS:
            for length in lengths(size):
                if segment == 24 and length > 1009:
                    continue  # thousands of tiny messages: slow and adds nothing
                for dtype, op in (
                    ("float64", "sum"),
                    ("float32", "sum"),
                    ("float32", "mean"),
                    ("int32", "sum"),
                ):
                    inputs = [rank_array(7, r, length, dtype) for r in range(size)]
                    exact = np.sum([a.astype(np.float64) for a in inputs], axis=0)
                    if op == "mean":
                        exact /= size
                    x = xp.asarray(inputs[comm.rank].copy())
                    comm.allreduce(x, op, algorithm)
                    got = backend.to_numpy(x)
                    assert got.dtype == np.dtype(dtype)
                    if dtype == "int32":
                        assert np.array_equal(got, exact.astype(np.int64)), (algorithm, length)
                    else:
                        eps = np.finfo(dtype).eps
                        bound = size * eps * np.sum([np.abs(a) for a in inputs], axis=0) + eps
                        err = np.abs(got - exact)
                        assert bool((err <= bound).all()), (algorithm, length, dtype, err.max())
                    hashes = digests(comm, x)
                    assert len(set(hashes)) == 1, f"{algorithm} n={length} {dtype}: ranks differ"
    collectives.SEGMENT_BYTES = default_segment


def check_bcast_p2p(comm, xp=np):
    """bcast from each end, a ring of send/recv/sendrecv, isend/irecv, and iallreduce."""
    rank, size = comm.rank, comm.size
    for root in (0, size - 1):
        x = xp.full(17, rank, dtype="float64")
        assert comm.bcast(x, root=root) is x
        assert bool((x == root).all())
    assert comm.bcast_object({"lr": 0.1 * (rank + 1)}, root=0) == {"lr": 0.1}

    right, left = (rank + 1) % size, (rank - 1) % size
    got = xp.zeros(5, dtype="float32")
    if rank % 2 == 0:
        comm.send(xp.full(5, rank, dtype="float32"), right, tag=3)
        comm.recv(got, left, tag=3)
    else:
        comm.recv(got, left, tag=3)
        comm.send(xp.full(5, rank, dtype="float32"), right, tag=3)
    assert bool((got == left).all())
    got[:] = -1
    comm.sendrecv(xp.full(5, rank, dtype="float32"), right, got, left, sendtag=4, recvtag=4)
    assert bool((got == left).all())
    got[:] = -1
    receive = comm.irecv(got, left, tag=5)
    send = comm.isend(xp.full(5, rank, dtype="float32"), right, tag=5)
    assert send.wait() is not None and receive.wait() is got
    assert bool((got == left).all()) and receive.test() and send.test()

    for algorithm in ALGORITHMS:
        arrays = [xp.full(n, rank, dtype="float64") for n in (0, 3, 100003)]
        requests = [comm.iallreduce(a, "mean", algorithm) for a in arrays]
        while not all(request.test() for request in requests):
            pass
        for array, request in zip(arrays, requests):
            assert request.wait() is array
            assert bool((array == (size - 1) / 2).all()), algorithm


def check_messages(comm, xp=np):
    """What the parameter server uses: tagged byte messages served as they arrive
    (wait_any, test_some), a duplicate communicator, ibarrier, cancel, allgather."""
    rank, size = comm.rank, comm.size
    mine = xp.asarray(rank_array(11, rank, 12, "float32").reshape(3, 4))
    expected = np.stack([rank_array(11, r, 12, "float32").reshape(3, 4) for r in range(size)])
    assert np.array_equal(backend.to_numpy(comm.allgather(mine)), expected)
    out = xp.zeros((size, 3, 4), dtype="float32")
    assert comm.allgather(mine, out) is out and np.array_equal(backend.to_numpy(out), expected)
    assert comm.allgather_object({"rank": rank}) == [{"rank": r} for r in range(size)]

    # rank 0 serves whichever of the other ranks' messages (3 r bytes of value r) arrives
    if rank == 0:
        inboxes = [xp.zeros(64, dtype="uint8") for _ in range(size - 1)]
        receives = [comm.irecv(inbox, r + 1, tag=7) for r, inbox in enumerate(inboxes)]
        late = comm.irecv(xp.zeros(8, dtype="uint8"), 1, tag=8)
        assert comm.test_some([late]) == [] and not comm.test_all([late])  # sent after the barrier
        pending = list(range(size - 1))
        while pending:
            waiting = [receives[i] for i in pending]
            for j in comm.test_some(waiting)[::-1] or [comm.wait_any(waiting)]:
                sender = pending.pop(j) + 1
                got = backend.to_numpy(inboxes[sender - 1])
                assert (got[: 3 * sender] == sender).all() and (got[3 * sender :] == 0).all(), got
        comm.barrier()
        never = comm.irecv(xp.zeros(8, dtype="uint8"), 1, tag=9)
        assert comm.wait_any([never, late]) == 1 and comm.wait_any([late, never]) == 0
        assert bool((backend.to_numpy(late.wait()) == 8).all())
        never.cancel()
        assert never.test() and comm.test_some([never, late]) == [0, 1]
    else:
        comm.wait_all([comm.isend(xp.full(3 * rank, rank, dtype="uint8"), 0, tag=7)])
        comm.barrier()
        if rank == 1:
            comm.send(xp.full(8, 8, dtype="uint8"), 0, tag=8)

    # a duplicate's messages never match the original's: on one communicator, the receive
    # posted first would take the message sent first
    other = comm.dup()
    assert (other.rank, other.size) == (rank, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    on_comm, on_other = xp.zeros(2, dtype="int64"), xp.zeros(2, dtype="int64")
    requests = [
        comm.irecv(on_comm, left, tag=5),
        other.irecv(on_other, left, tag=5),
        other.isend(xp.full(2, 1, dtype="int64"), right, tag=5),
        comm.isend(xp.full(2, 2, dtype="int64"), right, tag=5),
    ]
    comm.wait_all(requests)
    assert bool((on_comm == 2).all()) and bool((on_other == 1).all())

    barrier = comm.ibarrier()
    while not comm.test_all([barrier]):
        pass
    # wait_any over MPI's own requests and the background thread's
    x, y = xp.full(1000, rank, dtype="float64"), xp.full(10, rank, dtype="float64")
    requests = [comm.iallreduce(x, "mean", "ring"), comm.iallreduce(y, "sum", "mpi")]
    assert comm.wait_any(requests) in (0, 1)
    comm.wait_all(requests)
    assert bool((x == (size - 1) / 2).all()) and bool((y == size * (size - 1) // 2).all())


def check_thread_level(comm, xp=np):
    """Report whether iallreduce may use its background thread (the test compares)."""
    print(f"rank {comm.rank} background thread: {comm.threaded}", flush=True)


def check_auto(comm, xp=np):
    """``algorithm="auto"`` (rule, model, measurement) picks the same algorithm on every rank.

    The default is the fixed rule: the MPI library's own below 4 MiB, ring above.
    """
    assert comm.auto == "rule"
    assert [comm.choose_algorithm(xp.zeros(n, dtype="float32")) for n in (1, 2**20 - 1, 2**20)] == [
        "mpi",
        "mpi",
        "ring",
    ]
    for mode in ("rule", "model", "measure"):
        comm.auto = mode
        for length in (1, 1000, 300007):
            x = xp.full(length, comm.rank, dtype="float32")
            picked = comm.choose_algorithm(x)
            assert picked in dist.ALLREDUCE_ALGORITHMS
            everyone = comm.allgather_object(picked)
            assert len(set(everyone)) == 1, everyone
            comm.allreduce(x, "mean")
            assert bool((x == (comm.size - 1) / 2).all())
    comm.auto = "model"
    alpha, beta, gamma = comm.cost_params()
    assert alpha >= 0 and beta > 0 and gamma > 0
    assert len(set(comm.allgather_object(comm.cost_params()))) == 1


def check_errors(comm, xp=np):
    """Bad arguments raise errors that name the problem and the fix, on every rank alike."""
    x = xp.zeros(4, dtype="float32")
    cases = [
        (lambda: comm.allreduce(x, algorithm="hypercube"), "ring, butterfly, tree, rabenseifner"),
        (lambda: comm.allreduce(x, op="max"), "sum, mean"),
        (lambda: comm.allreduce(xp.zeros(3, dtype="int32"), op="mean"), "float"),
        (lambda: comm.allreduce(xp.zeros((4, 4), dtype="float32").T), "ascontiguousarray"),
        (lambda: comm.send(xp.zeros((4, 4), dtype="float32").T, 0), "ascontiguousarray"),
        (lambda: comm.allgather(x, xp.zeros(4 * comm.size, dtype="float32")), "one row per rank"),
        (lambda: comm.wait_any([]), "no requests"),
        (lambda: comm.test_some([comm]), "isend, irecv"),
        (lambda: dist.Request(x, wait=lambda: None, test=lambda: False).cancel(), "wait() for it"),
    ]
    for call, hint in cases:
        try:
            call()
        except (TypeError, ValueError) as exc:
            assert hint in str(exc), str(exc)
        else:
            raise AssertionError(f"no error; expected one mentioning {hint!r}")


def check_raise_on_one_rank(comm, xp=np):
    """Rank 1 raises while the others wait in a barrier: the hook must end the job."""
    if comm.rank == 1:
        raise RuntimeError("deliberate failure on rank 1")
    comm.barrier()


def check_grid(comm, xp=np):
    """Every grid of the job's rank count: each group holds exactly the ranks the formula names."""
    from minidl.dist.grid import AXES, Grid, GridError, GridShape

    size = comm.size
    for dp in range(1, size + 1):
        for tp in range(1, size // dp + 1):
            if size % (dp * tp):
                continue
            grid = Grid(comm, dp=dp, tp=tp, pp=size // (dp * tp))
            assert grid.coords == grid.shape.coords(comm.rank), (grid, grid.shape.coords(comm.rank))
            for axis in AXES:
                group = grid.group(axis)
                members = sorted(group.allgather_object(comm.rank))
                expected = sorted(
                    grid.shape.rank_of(**{**grid.coords, axis: i})
                    for i in range(getattr(grid.shape, axis))
                )
                assert members == expected, (grid, axis, members, expected)
                assert group.rank == grid.coords[axis], (grid, axis, group.rank)
    try:
        Grid(comm, dp=size + 1)
    except GridError as error:
        assert f"mpiexec -n {size + 1}" in str(error), error
    else:
        raise AssertionError("a grid larger than the job was accepted")
    assert str(GridShape.parse("tp=2, dp=3")) == "dp=3,tp=2"


def check_gpu(comm):
    """The checks above on CuPy arrays (staged or CUDA-aware, whichever this MPI is)."""
    cupy = backend.cupy_module()
    assert cupy is not None, "the GPU check needs CuPy and a GPU"
    cupy.cuda.Device(comm.rank % cupy.cuda.runtime.getDeviceCount()).use()
    for check in (check_rank_idiom, check_random_sums, check_bcast_p2p, check_messages):
        check(comm, cupy)


def run_named_checks(namespace, argv):
    """Run the ``check_<name>`` functions of ``namespace`` named in ``argv``, in order."""
    checks = {n[len("check_") :]: f for n, f in namespace.items() if n.startswith("check_")}
    comm = dist.init()
    for name in argv:
        checks[name](comm)
        print(f"CHECK {name} OK rank {comm.rank}", flush=True)


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
