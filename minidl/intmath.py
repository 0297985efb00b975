"""Integer formulas that several packages share: ceiling division, ceil(log2 n), powers of two,
the block sizes of n elements split over p parts.

Exact on Python ints of any size (no floating-point ``log2``).
"""


def ceil_div(a, b):
    """ceil(a / b) for positive b: how many blocks of b cover a (Winograd tiles, stride phases)."""
    return -(-a // b)


def ceil_log2(n):
    """ceil(log2 n), 0 for n <= 1: the depth of a balanced tree that sums n values, or the
    rounds of a binomial tree over n ranks (Ben-Nun & Hoefler 2019, §2.5)."""
    return 0 if n <= 1 else (n - 1).bit_length()


def largest_power_of_two(n):
    """The largest power of two <= n (n >= 1): the ranks that recursive doubling pairs up."""
    if n < 1:
        raise ValueError(f"largest_power_of_two: n must be >= 1, got {n}")
    return 1 << (n.bit_length() - 1)


def block_sizes(n, parts):
    """``n`` elements over ``parts`` parts: n // parts each, one more on the first n % parts
    (sizes differ by at most one; every part gets one when n >= parts)."""
    base, extra = divmod(n, parts)
    return tuple(base + (r < extra) for r in range(parts))


def block_bounds(n, parts):
    """``(start, stop)`` of each of ``block_sizes(n, parts)``'s parts, in order: the contiguous
    cut of n items (layers into pipeline stages or recomputed segments)."""
    bounds, start = [], 0
    for size in block_sizes(n, parts):
        bounds.append((start, start + size))
        start += size
    return tuple(bounds)
