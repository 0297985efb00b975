"""Hidden checks of the halo exchange and its adjoint: 4 ranks, halos of 3 rows, uneven blocks;
held to the visible checks' messages (the boundary rows to each neighbour, no collective)."""

from .. import hidden_check
from ..checks.spatial import TIMEOUT_S, halo_adjoint_on, halo_exchange_on

CASES = ((14, 3), (17, 2), (5, 1))  # (image height, halo rows)


@hidden_check("12.1", "4 ranks, halos of 1 to 3 rows", ranks=4, timeout=TIMEOUT_S)
def halo_exchange_four_ranks(comm):
    halo_exchange_on(comm, CASES)


@hidden_check("12.2", "4 ranks, halos of 1 to 3 rows", ranks=4, timeout=TIMEOUT_S)
def halo_adjoint_four_ranks(comm):
    halo_adjoint_on(comm, CASES)
