"""Split a batch (or any axis) into chunks whose temporaries stay in the CPU cache.

The chunks of a large batch also run on several threads (``parallel.parallel_for``,
``chunk_threads``), and so do the blocks of a large matrix product (``gemm``); how work
is cut never depends on the thread count, so neither do the results.

Multi-pass work (the convolutions' padding, gathers and scatters; LRN's
elementwise passes) runs at cache speed when one chunk's data is hot in L2
between passes; measured here, gathering Winograd tiles image by image took
3.4 ms against 6.9 ms for the whole batch at once (16x64x56x56). On a GPU
there is no such cache to fit, and every extra kernel launch costs, so a
CuPy batch is one chunk.
"""

import numpy as np

from .backend import get_array_module
from .parallel import parallel_for

CHUNK_BYTES = 4 * 2**20  # target size of the largest per-chunk temporary
SHARED_MIN_BYTES = 16 * 2**20  # a batch's temporaries from which its chunks go to threads
ELEMENTWISE_MIN_BYTES = 4 * 2**20  # an array from which one elementwise pass goes to threads
ROW_PIECES = 8  # pieces of such a pass (a fixed count: bits do not depend on threads)


def chunk_length(batch, item_bytes, gpu=False, chunk_bytes=None):
    """Items per chunk: about ``chunk_bytes`` (None: ``CHUNK_BYTES``) of per-item temporaries
    (the whole batch on a GPU)."""
    if gpu:
        return batch
    target = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    return max(1, min(batch, target // max(int(item_bytes), 1)))


def batch_chunks(batch, item_bytes, like, chunk_bytes=None):
    """Slices covering range(batch), chunked for the device of the array ``like``."""
    size = chunk_length(batch, item_bytes, get_array_module(like) is not np, chunk_bytes)
    return [slice(start, min(start + size, batch)) for start in range(0, batch, size)]


def chunk_threads(batch, item_bytes):
    """The ``threads`` argument of ``parallel.parallel_for`` over a batch's chunks: 1 (the
    caller's thread alone) when the batch's temporaries are under ``SHARED_MIN_BYTES``,
    else None (all of ``parallel.get_num_threads()``).

    A second thread pays only for NumPy calls of ~50 us and more: measured on 2 cores,
    waking a worker takes 30-100 us, and two threads that alternate short calls hand the
    GIL to each other at every call. LeNet's im2col passes (4-5 MB of columns at batch
    64, calls of 5-30 us) ran 1.1-1.7x slower on 2 threads; AlexNet conv1's (70 MB)
    1.4-1.6x faster (benchmarks/RESULTS.md, "Both cores").
    """
    return 1 if batch * int(item_bytes) < SHARED_MIN_BYTES else None


def by_rows(fn, *arrays):
    """``fn(*arrays)``, or ``fn`` on ``ROW_PIECES`` matching pieces of ``arrays`` along axis 0
    on ``parallel_for``'s threads when ``arrays[0]`` has ``ELEMENTWISE_MIN_BYTES`` or more
    (NumPy). ``fn`` must treat rows independently (a row of its outputs, which it writes
    into some of its arguments, depends on that row of its inputs alone): each row then
    gets the same bits however the rows are cut. Measured on 2 cores, one
    ``maximum`` over 300k float32 per thread ran 2.0x faster than over both halves on one;
    over 100k, not faster (waking a thread costs 30-100 us)."""
    first = arrays[0]
    if get_array_module(first) is not np or first.nbytes < ELEMENTWISE_MIN_BYTES:
        fn(*arrays)
        return
    n = first.shape[0]
    pieces = [slice(n * i // ROW_PIECES, n * (i + 1) // ROW_PIECES) for i in range(ROW_PIECES)]
    pieces = [rows for rows in pieces if rows.stop > rows.start]
    parallel_for(lambda rows: fn(*(a[rows] for a in arrays)), pieces)


GEMM_PIECE_FLOPS = 2**25  # ~0.3 ms of one core's GEMM: a piece worth waking a thread for
GEMM_PIECES = 8  # at most; fewer for smaller products (a count set by size, not threads)
GEMM_ALIGN = 16  # pieces start at multiples of this many rows (or columns)


def gemm(a, b, out=None):
    """``a @ b`` for 2-D arrays, a NumPy product of 2 * GEMM_PIECE_FLOPS or more cut into up to
    GEMM_PIECES blocks of its longer output side, each one BLAS call into ``out``, on
    ``parallel_for``'s threads. The cut follows the shapes alone: the same bits at any
    thread count (with BLAS on one thread)."""
    m, n = a.shape[0], b.shape[1]
    pieces = min(GEMM_PIECES, 2 * m * n * a.shape[1] // GEMM_PIECE_FLOPS, max(m, n) // GEMM_ALIGN)
    if not isinstance(a, np.ndarray) or pieces < 2:  # a small product, or CuPy's
        return a @ b if out is None else get_array_module(a).matmul(a, b, out=out)
    if out is None:
        out = np.empty((m, n), np.result_type(a, b))
    side = max(m, n)
    step = -(-side // pieces // GEMM_ALIGN) * GEMM_ALIGN
    cuts = [slice(start, min(start + step, side)) for start in range(0, side, step)]
    if m >= n:
        parallel_for(lambda rows: np.matmul(a[rows], b, out=out[rows]), cuts)
    else:
        parallel_for(lambda cols: np.matmul(a, b[:, cols], out=out[:, cols]), cuts)
    return out
