"""The messages of spatial parallelism as autograd Functions: halo exchange, row gather, grad sum.

Each of P ranks holds a contiguous block of image rows (``halo_cost.split_rows``). Each
Function is linear and its backward is its adjoint (<F x, y> = <x, F* y>):

- ``HaloExchange``: this rank's rows -> the rows its outputs read (``needed_rows``): the
  neighbours' boundary rows around its own, and padding rows at the image's top and
  bottom. Backward sends the borrowed rows' gradients back to their owners, who add them.
- ``GatherRows``: this rank's rows -> the whole image on every rank. Backward keeps this
  rank's rows: what follows runs replicated, so each rank's gradient is already the
  whole gradient (Megatron's gather / split pair, Shoeybi et al. 2019).
- ``SumOverGroup``: identity forward, gradient summed over the group backward: a weight
  each rank applies to its own rows gets the gradient of all rows.

Every byte a rank sends is added to a ``RankCounters`` (``halo_bytes``, ``gather_bytes``,
``grad_bytes``), which ``minidl.perf.halo_cost`` predicts.
"""

from minidl.autograd import Function
from minidl.backend import get_array_module

UP, DOWN = 1, 2  # message tags: towards the higher rank, towards the lower rank


def _exchange(comm, sends, receives, counters):
    """Send each ``(array, dest, tag)`` and receive each ``(shape, like, source, tag)`` at once;
    return the received arrays (None for an empty one: empty messages are skipped on both sides)."""
    received = [
        comm.irecv(get_array_module(like).empty(shape, like.dtype), source, tag)
        if shape[2]
        else None
        for shape, like, source, tag in receives
    ]
    sent = []
    for array, dest, tag in sends:
        if array.shape[2]:
            array = get_array_module(array).ascontiguousarray(array)
            counters.add("halo_bytes", array.nbytes)
            counters.add("halo_messages", 1)
            sent.append(comm.isend(array, dest, tag))
    comm.wait_all([request for request in received if request is not None] + sent)
    return [None if request is None else request.wait() for request in received]


class _Halo:
    """Rank r's rows of one layer: own block, rows read, and what crosses each boundary."""

    def __init__(self, needs, rows, rank):
        height, size = rows[-1][1], len(rows)
        self.start, self.stop = rows[rank]
        self.lo, self.hi = needs[rank]
        self.top, self.bottom = max(0, -self.lo), max(0, self.hi - height)  # padding rows
        self.below = max(0, self.start - max(self.lo, 0))  # rows borrowed from rank - 1
        self.above = max(0, min(self.hi, height) - self.stop)  # rows borrowed from rank + 1
        self.to_below = max(0, min(needs[rank - 1][1], height) - self.start) if rank else 0
        self.to_above = max(0, self.stop - max(needs[rank + 1][0], 0)) if rank < size - 1 else 0
        # the part of the own block that is read, as indices into it
        self.own = slice(
            max(0, max(self.lo, 0) - self.start), min(self.stop, min(self.hi, height)) - self.start
        )


def _rows(array, start, stop):
    return array[:, :, start:stop]


def _along(array, axis):
    """``array`` with ``axis`` (2: height, 3: width) as axis 2, where the code below splits;
    ``_back`` swaps back into a C-contiguous array."""
    if axis == 2:
        return array
    if axis != 3:
        raise ValueError(f"spatial splits run along axis 2 (height) or 3 (width), not {axis}")
    return array.swapaxes(2, 3)


def _back(array, axis):
    return get_array_module(array).ascontiguousarray(array if axis == 2 else array.swapaxes(2, 3))


class HaloExchange(Function):
    """(N, C, own rows, W) -> (N, C, hi - lo, W): the rows [lo, hi) this rank's outputs read.
    ``needs`` and ``rows``: every rank's (lo, hi) and (start, stop); rows outside the
    image hold ``pad_value`` (0, or -inf for max pooling). ``axis=3`` exchanges columns."""

    def forward(self, x, comm, needs, rows, pad_value, counters, axis=2):
        xp = get_array_module(x)
        self.axis, x = axis, _along(x, axis)
        n, c, own_rows, w = x.shape
        halo = _Halo(needs, rows, comm.rank)
        if own_rows != halo.stop - halo.start:
            raise ValueError(
                f"HaloExchange: rank {comm.rank} of {comm.size} holds {own_rows} rows but the "
                f"split of {rows[-1][1]} rows gives it {halo.stop - halo.start} (rows "
                f"{halo.start}..{halo.stop - 1}); slice the input with spatial.local_rows"
            )
        self.comm, self.halo, self.counters = comm, halo, counters
        below, above = _exchange(
            comm,
            [
                (_rows(x, 0, halo.to_below), comm.rank - 1, DOWN),
                (_rows(x, own_rows - halo.to_above, own_rows), comm.rank + 1, UP),
            ],
            [
                ((n, c, halo.below, w), x, comm.rank - 1, UP),
                ((n, c, halo.above, w), x, comm.rank + 1, DOWN),
            ],
            counters,
        )
        out = xp.empty((n, c, halo.hi - halo.lo, w), x.dtype)
        parts = [
            xp.full((n, c, halo.top, w), pad_value, x.dtype),
            below,
            x[:, :, halo.own],
            above,
            xp.full((n, c, halo.bottom, w), pad_value, x.dtype),
        ]
        row = 0
        for part in parts:
            if part is not None and part.shape[2]:
                out[:, :, row : row + part.shape[2]] = part
                row += part.shape[2]
        return _back(out, axis)

    def backward(self, g):
        xp = get_array_module(g)
        halo, comm, g = self.halo, self.comm, _along(g, self.axis)
        n, c, _, w = g.shape
        first = halo.top + halo.below  # the first row of the own block in g
        own = halo.own.stop - halo.own.start
        from_below, from_above = _exchange(
            comm,
            [
                (_rows(g, halo.top, first), comm.rank - 1, UP),
                (_rows(g, first + own, first + own + halo.above), comm.rank + 1, DOWN),
            ],
            [
                ((n, c, halo.to_below, w), g, comm.rank - 1, DOWN),
                ((n, c, halo.to_above, w), g, comm.rank + 1, UP),
            ],
            self.counters,
        )
        own_rows = halo.stop - halo.start
        gx = xp.zeros((n, c, own_rows, w), g.dtype)
        gx[:, :, halo.own] = _rows(g, first, first + own)
        if from_below is not None:
            gx[:, :, : halo.to_below] += from_below
        if from_above is not None:
            gx[:, :, own_rows - halo.to_above :] += from_above
        return _back(gx, self.axis)


class GatherRows(Function):
    """(N, C, own rows, W) -> (N, C, H, W) on every rank; ``axis=3`` gathers columns."""

    def forward(self, x, comm, rows, counters, axis=2):
        xp = get_array_module(x)
        self.axis, x = axis, _along(x, axis)
        n, c, own_rows, w = x.shape
        longest = max(stop - start for start, stop in rows)
        block = xp.zeros((n, c, longest, w), x.dtype)
        block[:, :, :own_rows] = x
        counters.add("gather_bytes", block.nbytes * (comm.size - 1))
        blocks = comm.allgather(block)
        self.own = slice(*rows[comm.rank])
        whole = xp.concatenate(
            [blocks[r][:, :, : stop - start] for r, (start, stop) in enumerate(rows)], axis=2
        )
        return _back(whole, axis)

    def backward(self, g):
        return _back(_along(g, self.axis)[:, :, self.own], self.axis)


class SumOverGroup(Function):
    """Identity forward; backward sums the gradient over ``comm`` (an allreduce)."""

    def forward(self, x, comm, counters):
        self.comm, self.counters = comm, counters
        return x

    def backward(self, g):
        if self.comm.size == 1:
            return g
        g = get_array_module(g).array(g, order="C")
        self.counters.add("grad_bytes", g.nbytes)
        return self.comm.allreduce(g, op="sum")
