"""A bounded cache of large host buffers, so that a training step's temporaries are reused.

glibc returns large freed blocks to the OS (munmap, or a heap trim), so every step
page-faults its im2col columns, Winograd tiles, padded copies and outputs in again:
measured, ~40% of a NumPy LeNet step (notes: machine-baselines). ``empty`` hands out
arrays cut from cached blocks instead; when the last view of an array dies, its block
goes back to the cache, not to the OS. This is the caching-allocator idea of the GPU
frameworks (CuPy's memory pool), done for NumPy inside minidl, so nothing process-wide
changes: other libraries in the process keep glibc's behaviour.

* Blocks come in size classes, 8 per power of two (at most 12.5% unused); a request takes
  a free block of its class, else the smallest free one up to twice its size. Arrays
  under ``MIN_POOLED_BYTES`` come from NumPy, whose small blocks glibc keeps anyway.
* ``MINIDL_POOL_BYTES=0`` (or ``limit=0``) caches nothing: every array from NumPy.
* The cache is bounded: free blocks above ``limit`` bytes are released, least recently
  returned first (``MINIDL_POOL_BYTES``, default min(2 GiB, a quarter of the memory)).
  Blocks in use are not counted: they are the program's live arrays.
* Thread-safe: handing out takes a lock; a block comes back from the finaliser of its
  array's owner (any thread, any time) through a queue that the next call drains.
* ``empty_cache()`` releases every free block (and CuPy's cached device memory).
* CuPy arrays come from CuPy's own pool (``cupy.empty``): no second cache on top of it.
"""

import collections
import functools
import math
import os
import threading

import numpy as np

MIN_POOLED_BYTES = 128 * 2**10  # glibc's default mmap threshold: smaller blocks stay in its heap
ALIGNMENT = 64  # bytes: a cache line, the width of an AVX-512 load
CLASSES_PER_OCTAVE = 8
REUSE_FACTOR = 2  # a request may take a free block up to this many times its size


@functools.cache
def physical_memory_bytes():
    """The machine's memory (RAM) in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def size_class(nbytes):
    """The block size that serves ``nbytes``: rounded up to 1/8 of its power of two."""
    step = max(1 << (max(int(nbytes) - 1, 1).bit_length() - 1), CLASSES_PER_OCTAVE)
    step //= CLASSES_PER_OCTAVE
    return -(-int(nbytes) // step) * step


def default_limit():
    """``MINIDL_POOL_BYTES`` when set, else min(2 GiB, a quarter of the machine's memory)."""
    value = os.environ.get("MINIDL_POOL_BYTES")
    if value is not None:
        try:
            return int(value)
        except ValueError:
            raise ValueError(
                f"MINIDL_POOL_BYTES={value!r} is not a whole number of bytes; "
                "set it to e.g. 1073741824 (1 GiB), or 0 to cache nothing"
            ) from None
    memory = physical_memory_bytes()
    return 2**31 if memory is None else min(2**31, memory // 4)


def format_bytes(nbytes):
    """``4.0 TiB``, ``12.0 MiB``, ``512 B``: sizes for error messages."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


class _Block:
    """``size`` bytes of memory from NumPy, from an ``ALIGNMENT``-byte boundary at ``address``."""

    __slots__ = ("memory", "address", "size")

    def __init__(self, size):
        self.memory = np.empty(size + ALIGNMENT, np.uint8)
        start = self.memory.__array_interface__["data"][0]
        self.address, self.size = start + -start % ALIGNMENT, size


class _Lease:
    """The owner (``.base``) of the arrays cut from one block; gives the block back when
    the last of them dies."""

    __slots__ = ("block", "pool", "__array_interface__")

    def __init__(self, block, pool, shape, dtype):
        self.block, self.pool = block, pool
        self.__array_interface__ = {
            "data": (block.address, False),
            "shape": shape,
            "typestr": dtype.str,
            "version": 3,
        }

    def __del__(self):
        self.pool.give_back(self.block)


class BufferPool:
    """Cached host blocks by size class; see the module docstring."""

    def __init__(self, limit=None):
        self.limit = default_limit() if limit is None else int(limit)
        self.free = {}  # size class -> [blocks]
        self.recency = collections.OrderedDict()  # block -> None, least recent first
        self.returned = collections.deque()  # blocks whose arrays died, not yet sorted
        self.lock = threading.Lock()
        self.free_bytes = 0  # bytes of the free blocks (bounded by ``limit``)
        self.leased_bytes = 0  # bytes of the blocks in use
        self.hits = self.misses = 0

    def empty(self, shape, dtype, op="an array"):
        """An uninitialised NumPy array, from a cached block when its size class has one."""
        shape = tuple(int(d) for d in (shape if isinstance(shape, tuple | list) else (shape,)))
        dtype = np.dtype(dtype)
        nbytes = dtype.itemsize * math.prod(shape)
        check_size(nbytes, shape, dtype, op)
        if nbytes < MIN_POOLED_BYTES or self.limit <= 0:  # limit 0: NumPy's arrays, no cache
            return np.empty(shape, dtype)
        size = size_class(nbytes)
        with self.lock:
            self._drain()
            blocks = self.free.get(size) or self.free.get(self._larger_free_class(size))
            if blocks:
                block = blocks.pop()
                del self.recency[block]
                size = block.size
                self.free_bytes -= size
                self.hits += 1
            else:
                block = None
                self.misses += 1
            self.leased_bytes += size
        if block is None:
            block = _Block(size)
        return np.asarray(_Lease(block, self, shape, dtype))

    def _larger_free_class(self, size):
        """The smallest size class with a free block, up to ``REUSE_FACTOR`` times ``size``
        (None when there is none): the blocks that a backward pass frees then serve its
        later requests of other sizes, and the cache holds less than one block per size."""
        fits = [other for other, blocks in self.free.items() if blocks and size < other]
        best = min(fits, default=None)
        return best if best is not None and best <= REUSE_FACTOR * size else None

    def give_back(self, block):
        """Queue a block whose arrays died (``deque.append`` is atomic: safe from any thread,
        even inside ``empty``), and file it now unless another call holds the lock."""
        self.returned.append(block)
        if self.lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self.lock.release()

    def _drain(self):
        """File the returned blocks as free (most recent last), then release the least
        recently returned ones above the limit. Called with the lock held."""
        while self.returned:
            block = self.returned.popleft()
            self.leased_bytes -= block.size
            self.free.setdefault(block.size, []).append(block)
            self.recency[block] = None
            self.free_bytes += block.size
        while self.free_bytes > self.limit:
            block, _ = self.recency.popitem(last=False)
            self.free[block.size].remove(block)  # blocks compare by identity
            self.free_bytes -= block.size

    def clear(self):
        """Release every free block to the OS (blocks in use come back, and stay, later)."""
        with self.lock:
            self._drain()
            self.free.clear()
            self.recency.clear()
            self.free_bytes = 0

    def stats(self):
        """{"free_bytes", "leased_bytes", "limit", "hits", "misses"} at this moment."""
        with self.lock:
            self._drain()
            return {
                "free_bytes": self.free_bytes,
                "leased_bytes": self.leased_bytes,
                "limit": self.limit,
                "hits": self.hits,
                "misses": self.misses,
            }


def check_size(nbytes, shape, dtype, op):
    """Refuse an array larger than the machine's memory, naming the op, the shape and the size
    (instead of letting the OS swap, or kill the process)."""
    memory = physical_memory_bytes()
    if memory is not None and nbytes > memory:
        raise MemoryError(
            f"{op}: an array of shape {shape} ({dtype}) needs {format_bytes(nbytes)}, more "
            f"than this machine's {format_bytes(memory)} of memory; use a smaller batch "
            "(or a convolution algorithm with less workspace)"
        )


HOST_POOL = BufferPool()
