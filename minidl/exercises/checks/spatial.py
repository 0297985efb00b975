"""Checks of the spatial exercises (12.x): halo exchange over image rows and its adjoint.

Oracles that run no exercise region: the whole image, rebuilt from a seed on
every rank, zero-padded and cut to the rows each rank needs (forward); the
adjoint identity <E x, y> = <x, E* y> summed over the ranks, with E minidl's
tuned ``HaloExchange`` (backward); and that tuned Function's own gradient.
Cases cover halos of 1 and 2 rows and blocks of uneven height, on the job's 3 ranks and
on 2 split off. The exchanges run over a ``PointToPointComm``: a send returns only once its
receive has started, so an order that relies on MPI buffering deadlocks; no collective of
the library may run; and each rank sends one message of its ``halo`` boundary rows to each
neighbour, nothing else (not its whole block, not the image).
"""

import numpy as np

from minidl.dist.spatial import HaloExchange, split_rows
from minidl.dist.spatial import exchange as tuned_exchange
from minidl.exercises import exercise, expect_close, expect_true
from minidl.exercises.checks.collectives import (
    PointToPointComm,
    expect_on_every_rank,
    on_first_ranks,
)
from minidl.exercises.checks.tuned import forbids
from minidl.perf.halo_cost import needed_rows
from minidl.perf.telemetry import RankCounters
from minidl.reference.dist import halo as reference

PATH = "minidl/reference/dist/halo.py"
CASES = ((9, 1), (11, 2), (7, 2), (6, 0))  # (image height, halo rows)
TIMEOUT_S = 20.0  # a right answer takes well under a second; a deadlock is reported after this


def expect_halo_messages(what, strict, rank, size, rows_bytes):
    """``strict``'s record against the exchange: no library collective, and one message of
    ``rows_bytes`` (the halo rows) to each neighbour that exists, when there is a halo."""
    library = strict.library_calls()
    expect_true(
        f"{what}: built from messages, no collective of the library",
        not library,
        detail=f"rank {rank} used comm.{', comm.'.join(library)}; send the boundary rows to the "
        "neighbours with comm.sendrecv",
    )
    neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < size] if rows_bytes else []
    expect_true(
        f"{what}: rank {rank} sends its {rows_bytes} bytes of boundary rows to each neighbour "
        f"{neighbours}, once",
        sorted(strict.sent) == sorted((r, rows_bytes) for r in neighbours),
        detail=f"it sent (rank, bytes) {strict.sent}: only the halo rows travel, not blocks or "
        "the image",
    )


def image(height, seed=12):
    """The whole (2, 3, height, 4) image, the same on every rank."""
    return np.random.default_rng([seed, height]).standard_normal((2, 3, height, 4))


def tuned(comm, height, halo):
    """minidl's HaloExchange for a (2 halo + 1)-row kernel, stride 1, padding halo."""
    needs = needed_rows(height, 2 * halo + 1, 1, halo, 1, comm.size)
    function = HaloExchange()
    return function, dict(
        comm=comm,
        needs=needs,
        rows=split_rows(height, comm.size),
        pad_value=0.0,
        counters=RankCounters(),
    )


@exercise(
    "12.1",
    "Halo exchange: a block of rows with its neighbours' boundary rows around it",
    path=PATH,
    ranks=3,
    timeout=TIMEOUT_S,
    hint="copy x into the middle; shift your last `halo` rows up while receiving the lower "
    "halo from below, then your first rows down while receiving the upper halo; the first "
    "and last rank keep their zeros",
)
@forbids(tuned_exchange, name="minidl's tuned halo exchange")
def check_halo_exchange(comm):
    halo_exchange_on(comm)
    if comm.size > 2:
        on_first_ranks(comm, comm.size - 1, halo_exchange_on)


def halo_exchange_on(comm, cases=CASES):
    """The halo exchange of every case on ``comm``'s ranks against the padded image."""
    comparisons, messages = [], []
    for height, halo in cases:
        whole = image(height)
        start, stop = split_rows(height, comm.size)[comm.rank]
        padded = np.pad(whole, ((0, 0), (0, 0), (halo, halo), (0, 0)))
        x = np.ascontiguousarray(whole[:, :, start:stop])
        strict = PointToPointComm(comm)
        got = reference.halo_exchange(strict, x, halo)
        what = f"rank {comm.rank}'s rows {start}..{stop - 1} of {height} with a halo of {halo}"
        comparisons.append((what, got, padded[:, :, start : stop + 2 * halo]))
        comparisons.append((f"{what}: x left as it was", x, whole[:, :, start:stop]))
        messages.append((f"height {height}, halo {halo}", strict, x[:, :, :halo].nbytes))

    def verify():
        for what, strict, rows_bytes in messages:
            expect_halo_messages(what, strict, comm.rank, comm.size, rows_bytes)
        for what, got, expected in comparisons:
            expect_close(what, got, expected, rtol=0, atol=0)

    expect_on_every_rank(comm, verify)


@exercise(
    "12.2",
    "The adjoint of the halo exchange: gradients of borrowed rows go home",
    path=PATH,
    ranks=3,
    timeout=TIMEOUT_S,
    hint="start from the middle rows of g; send the first `halo` rows of g down and the last "
    "up, and add what the neighbours send back to your last and first rows",
)
@forbids(tuned_exchange, name="minidl's tuned halo exchange")
def check_halo_adjoint(comm):
    halo_adjoint_on(comm)
    if comm.size > 2:
        on_first_ranks(comm, comm.size - 1, halo_adjoint_on)


def halo_adjoint_on(comm, cases=CASES):
    """The adjoint of every case on ``comm``'s ranks against the tuned one and <E x, y>."""
    rng = np.random.default_rng([12, comm.rank, comm.size])
    comparisons, messages = [], []
    for height, halo in cases:
        start, stop = split_rows(height, comm.size)[comm.rank]
        function, params = tuned(comm, height, halo)
        x = rng.standard_normal((2, 3, stop - start, 4))
        y = rng.standard_normal((2, 3, stop - start + 2 * halo, 4))
        function.forward(x, **params)
        strict, saved = PointToPointComm(comm), y.copy()
        got = reference.halo_exchange_backward(strict, y, halo)
        what = f"E* y on rank {comm.rank}, height {height}, halo {halo}"
        comparisons.append((what, got, function.backward(saved)))
        comparisons.append((f"{what}: the gradient y left as it was", y, saved))
        messages.append((f"height {height}, halo {halo}", strict, x[:, :, :halo].nbytes))
        sums = np.array([np.vdot(function.forward(x, **params), y), 0.0])
        if got is not None and got.shape == x.shape:
            sums[1] = np.vdot(x, got)
        left, right = comm.allreduce(sums)
        comparisons.append(
            (f"<x, E* y> against <E x, y> summed over ranks, halo {halo}", right, left)
        )

    def verify():
        for what, strict, rows_bytes in messages:
            expect_halo_messages(what, strict, comm.rank, comm.size, rows_bytes)
        for what, got, expected in comparisons:
            expect_close(what, got, expected, rtol=1e-12, atol=1e-12)

    expect_on_every_rank(comm, verify)
