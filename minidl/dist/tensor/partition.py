"""How a dimension of n elements is split over p ranks, uneven sizes included.

Rank r holds the block [offset_r, offset_r + size_r) with size_r = n // p + (r < n % p):
the first n % p ranks hold one element more, so sizes differ by at most one and
every rank holds at least one element when n >= p. The blocks are contiguous and
in rank order, so concatenating them in rank order gives the whole dimension back.
"""

import dataclasses

from ...backend import get_array_module
from ...perf.tensor_volume import block_sizes


@dataclasses.dataclass(frozen=True)
class Partition:
    """``n`` elements over ``parts`` ranks: ``sizes``, ``offsets``, ``slice(r)``."""

    n: int
    parts: int

    @property
    def sizes(self) -> tuple:
        return block_sizes(self.n, self.parts)

    @property
    def offsets(self) -> tuple:
        sizes = self.sizes
        return tuple(sum(sizes[:r]) for r in range(self.parts))

    @property
    def largest(self) -> int:
        return self.sizes[0]

    def slice(self, rank: int) -> slice:
        start = self.offsets[rank]
        return slice(start, start + self.sizes[rank])


def take_block(array, axis, comm_rank, parts):
    """This rank's block of ``array`` along ``axis`` (a copy, contiguous)."""
    block = Partition(array.shape[axis], parts).slice(comm_rank)
    index = (slice(None),) * (axis % array.ndim) + (block,)
    return array[index].copy()


def gather_blocks(comm, block, axis, n):
    """Every rank's block along ``axis`` concatenated in rank order (``n`` elements in all).

    Blocks of uneven size travel padded to the largest (one ``allgather`` of
    ``parts * largest`` rows), so each rank sends ``largest`` rows along ``axis``.
    """
    xp = get_array_module(block)
    part = Partition(n, comm.size)
    axis = axis % block.ndim
    if block.shape[axis] != part.sizes[comm.rank]:
        raise ValueError(
            f"gather_blocks: rank {comm.rank} holds {block.shape[axis]} elements along axis "
            f"{axis}, but {n} over {comm.size} ranks gives it {part.sizes[comm.rank]}"
        )
    rows = xp.moveaxis(block, axis, 0)
    padded = xp.zeros((part.largest,) + rows.shape[1:], dtype=block.dtype)
    padded[: rows.shape[0]] = rows
    everyone = comm.allgather(padded)
    whole = xp.concatenate([everyone[r, :size] for r, size in enumerate(part.sizes)])
    return xp.ascontiguousarray(xp.moveaxis(whole, 0, axis))
