"""Checks of the spatial exercises (12.x): halo exchange over image rows and its adjoint.

Oracles that run no exercise region: the whole image, rebuilt from a seed on
every rank, zero-padded and cut to the rows each rank needs (forward); the
adjoint identity <E x, y> = <x, E* y> summed over the ranks, with E minidl's
tuned ``HaloExchange`` (backward); and that tuned Function's own gradient.
Cases cover halos of 1 and 2 rows and blocks of uneven height.
"""

import numpy as np

from minidl.dist.spatial import HaloExchange, split_rows
from minidl.exercises import exercise, expect_close
from minidl.exercises.checks.collectives import expect_on_every_rank
from minidl.perf.halo_cost import needed_rows
from minidl.perf.telemetry import RankCounters
from minidl.reference.dist import halo as reference

PATH = "minidl/reference/dist/halo.py"
CASES = ((9, 1), (11, 2), (7, 2), (6, 0))  # (image height, halo rows)


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
    hint="copy x into the middle; shift your last `halo` rows up while receiving the lower "
    "halo from below, then your first rows down while receiving the upper halo; the first "
    "and last rank keep their zeros",
)
def check_halo_exchange(comm):
    comparisons = []
    for height, halo in CASES:
        whole = image(height)
        start, stop = split_rows(height, comm.size)[comm.rank]
        padded = np.pad(whole, ((0, 0), (0, 0), (halo, halo), (0, 0)))
        got = reference.halo_exchange(comm, np.ascontiguousarray(whole[:, :, start:stop]), halo)
        comparisons.append(
            (
                f"rank {comm.rank}'s rows {start}..{stop - 1} of {height} with a halo of {halo}",
                got,
                padded[:, :, start : stop + 2 * halo],
            )
        )

    def verify():
        for what, got, expected in comparisons:
            expect_close(what, got, expected, rtol=0, atol=0)

    expect_on_every_rank(comm, verify)


@exercise(
    "12.2",
    "The adjoint of the halo exchange: gradients of borrowed rows go home",
    path=PATH,
    ranks=3,
    hint="start from the middle rows of g; send the first `halo` rows of g down and the last "
    "up, and add what the neighbours send back to your last and first rows",
)
def check_halo_adjoint(comm):
    rng = np.random.default_rng([12, comm.rank])
    comparisons = []
    for height, halo in CASES:
        start, stop = split_rows(height, comm.size)[comm.rank]
        function, params = tuned(comm, height, halo)
        x = rng.standard_normal((2, 3, stop - start, 4))
        y = rng.standard_normal((2, 3, stop - start + 2 * halo, 4))
        function.forward(x, **params)
        got = reference.halo_exchange_backward(comm, y, halo)
        comparisons.append(
            (f"E* y on rank {comm.rank}, height {height}, halo {halo}", got, function.backward(y))
        )
        sums = np.array([np.vdot(function.forward(x, **params), y), 0.0])
        if got is not None and got.shape == x.shape:
            sums[1] = np.vdot(x, got)
        left, right = comm.allreduce(sums)
        comparisons.append(
            (f"<x, E* y> against <E x, y> summed over ranks, halo {halo}", right, left)
        )

    def verify():
        for what, got, expected in comparisons:
            expect_close(what, got, expected, rtol=1e-12, atol=1e-12)

    expect_on_every_rank(comm, verify)
