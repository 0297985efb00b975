"""Halo rows and bytes of spatial parallelism: a window layer split over image height.

P ranks split the H rows of an activation into contiguous blocks, rank r holding
rows [b_r, b_(r+1)) with b_r = floor(r H / P) (``split_rows``), and the O output
rows of a window layer (convolution or pooling: span D = d (K - 1) + 1, stride s,
padding p; O from ``conv.geometry.output_size``) alike, c_r = floor(r O / P).
Output row i reads the input rows [i s - p, i s - p + D). So at the boundary
between ranks r-1 and r the rows that cross are (Ben-Nun & Hoefler 2019, §5.3,
"halo" of a spatially partitioned convolution):

    up_r   = max(0, b_r - max(0, c_r s - p))                    r-1 -> r
    down_r = max(0, min(H, (c_r - 1) s - p + D) - b_r)          r -> r-1

The forward pass sends these rows of the input, the backward pass the same
rows of its gradient, so one step of a batch of N images of C channels and
width W moves

    bytes = 2 * itemsize * N * C * W * sum over r = 1..P-1 of (up_r + down_r)

per layer (``halo_bytes``; half of it for the first layer, whose input, the
data, needs no gradient). A split needs every rank to own at least one
input and one output row, and every crossing row to come from the adjacent
rank (``needed_rows`` refuses a split that would need a rank two hops away).
"""

from minidl.conv.geometry import output_size


class SplitError(ValueError):
    """A spatial split that cannot work; the message says what would fit."""


def split_rows(height, parts):
    """The [start, stop) of each of ``parts`` contiguous blocks of ``height`` rows."""
    bounds = [r * height // parts for r in range(parts + 1)]
    return tuple(zip(bounds[:-1], bounds[1:]))


def needed_rows(height, kernel, stride=1, padding=0, dilation=1, parts=2):
    """[(lo_r, hi_r)]: the input rows (of the padded plane, so lo may be < 0 and hi > H)
    that rank r's outputs [c_r, c_(r+1)) read: lo_r = c_r s - p, hi_r = (c_(r+1) - 1) s - p + D.

    Raises ``SplitError`` when a rank would own no row, or would read rows beyond its
    neighbours' (a window wider than a neighbour's block).
    """
    span = dilation * (kernel - 1) + 1
    out = output_size(height, kernel, stride, padding, dilation)
    if min(height, out) < parts:
        raise SplitError(
            f"{height} input rows give {out} output rows, fewer than the {parts} ranks: "
            f"every rank needs at least one row of each (at most {min(height, out)} ranks fit)"
        )
    rows, outs = split_rows(height, parts), split_rows(out, parts)
    needs = [(c0 * stride - padding, (c1 - 1) * stride - padding + span) for c0, c1 in outs]
    for r, (lo, hi) in enumerate(needs):
        first = rows[max(r - 1, 0)][0]
        last = rows[min(r + 1, parts - 1)][1]
        if max(lo, 0) < first or min(hi, height) > last or lo > rows[r][1] or hi < rows[r][0]:
            raise SplitError(
                f"rank {r} of {parts} computes output rows {outs[r][0]}..{outs[r][1] - 1}, which "
                f"read input rows {max(lo, 0)}..{min(hi, height) - 1}, but it and its neighbours "
                f"hold rows {first}..{last - 1}: a window reaches past the adjacent rank"
            )
    return needs


def halo_rows(height, kernel, stride=1, padding=0, dilation=1, parts=2):
    """[(up_r, down_r) for r = 1..P-1]: rows crossing each boundary of a P-way split."""
    needs = needed_rows(height, kernel, stride, padding, dilation, parts)
    bounds = [start for start, _ in split_rows(height, parts)]
    return [
        (max(0, bounds[r] - max(0, needs[r][0])), max(0, min(height, needs[r - 1][1]) - bounds[r]))
        for r in range(1, parts)
    ]


def halo_bytes(
    shape, kernel, stride=1, padding=0, dilation=1, parts=2, itemsize=8, input_grad=True
):
    """Bytes one training step moves for the halos of one layer on input ``shape`` (N, C, H, W),
    summed over all ranks: the forward rows, plus their gradients when the input needs one
    (not for the first layer, whose input is the data)."""
    batch, channels, height, width = shape
    rows = sum(
        up + down for up, down in halo_rows(height, kernel, stride, padding, dilation, parts)
    )
    return (2 if input_grad else 1) * itemsize * batch * channels * width * rows
