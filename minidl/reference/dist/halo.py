"""Halo exchange for a convolution split over image rows, and its adjoint.

P ranks split the H rows of an (N, C, H, W) activation into contiguous blocks.
A stride-1 convolution with a (2h+1)-row kernel and h rows of zero padding
computes output row i from input rows i-h .. i+h, so the rank holding rows
[a, b) needs rows [a-h, b+h): its own block with h rows of each neighbour
around it, the *halo*, and zeros beyond the image's first and last rows
(Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep Learning,
§5.3). Forward, every rank sends its first h rows to the rank below and its
last h rows to the rank above, and receives theirs.

The exchange E is linear; its adjoint E* (the backward pass) sends the
gradients of the borrowed rows back to their owners, who add them to the
gradients of their own rows:

    <E x, y> = <x, E* y>   (summed over the ranks)

Each rank must hold at least h rows. ``minidl.dist.spatial.HaloExchange`` is
the general form (any kernel, stride, padding, dilation and uneven blocks).

The check runs the exchanges on 3 ranks and on 2, with sends that return only once their
receive has started (an order that relies on MPI's buffering deadlocks), and holds each rank
to one message of its h boundary rows to each neighbour: no collective, no whole blocks.
An exercise region here must not call the tuned halo exchange (``minidl.dist.spatial``): the
check fails one that does, since the exercise is to write the algorithm out.
"""

from minidl.backend import get_array_module


def shift(comm, send, dest, receive, source):
    """Send ``send`` to rank ``dest`` while receiving ``receive`` from rank ``source``; a rank
    outside 0..P-1 means there is no neighbour on that side (the chain's ends)."""
    to, fro = 0 <= dest < comm.size, 0 <= source < comm.size
    if to and fro:
        comm.sendrecv(send, dest, receive, source)
    elif to:
        comm.send(send, dest)
    elif fro:
        comm.recv(receive, source)


def halo_exchange(comm, x, halo):
    """(N, C, n, W) own rows -> (N, C, n + 2 halo, W): ``halo`` rows of each neighbour around
    them (zeros where there is no neighbour)."""
    xp = get_array_module(x)
    n = x.shape[2]
    below, above = comm.rank - 1, comm.rank + 1
    out = xp.zeros(x.shape[:2] + (n + 2 * halo,) + x.shape[3:], x.dtype)
    # BEGIN EXERCISE 12.1
    out[:, :, halo : halo + n] = x
    if halo:
        first = xp.ascontiguousarray(x[:, :, :halo])
        last = xp.ascontiguousarray(x[:, :, n - halo :])
        from_below, from_above = xp.empty_like(first), xp.empty_like(last)
        shift(comm, last, above, from_below, below)  # upwards
        shift(comm, first, below, from_above, above)  # downwards
        if below >= 0:
            out[:, :, :halo] = from_below
        if above < comm.size:
            out[:, :, n + halo :] = from_above
    # END EXERCISE 12.1
    return out


def halo_exchange_backward(comm, g, halo):
    """E*: (N, C, n + 2 halo, W) gradient -> (N, C, n, W): the own rows' gradient plus the
    gradients the neighbours send back for the rows they borrowed."""
    xp = get_array_module(g)
    n = g.shape[2] - 2 * halo
    below, above = comm.rank - 1, comm.rank + 1
    gx = xp.array(g[:, :, halo : halo + n], order="C")
    # BEGIN EXERCISE 12.2
    if halo:
        lower = xp.ascontiguousarray(g[:, :, :halo])  # gradient of the rank below's rows
        upper = xp.ascontiguousarray(g[:, :, n + halo :])  # ... of the rank above's rows
        for_first, for_last = xp.empty_like(lower), xp.empty_like(upper)
        shift(comm, lower, below, for_last, above)  # downwards: the lower halo's gradient home
        shift(comm, upper, above, for_first, below)  # upwards: the upper halo's gradient home
        if above < comm.size:
            gx[:, :, n - halo :] += for_last
        if below >= 0:
            gx[:, :, :halo] += for_first
    # END EXERCISE 12.2
    return gx
