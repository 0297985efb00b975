"""Intra-op parallelism: the chunks of one op's work on a small persistent pool of threads.

NumPy releases the GIL inside its large ufunc, copy and matmul loops, so Python threads
that each run the same op on their own slice of a batch use several cores at once: the
pads, gathers, layout copies, pooling and elementwise passes that NumPy runs on one
thread while OpenBLAS runs its GEMMs on all of them. ``parallel_for(fn, chunks)`` calls
``fn(chunk)`` for every chunk, spread over ``get_num_threads()`` threads (the caller's
and ``get_num_threads() - 1`` workers), and returns the results in the chunks' order.

* **Thread count**: ``set_num_threads(n)`` (also ``md.backend.set_num_threads``; the
  ``minidl`` command's ``--threads`` sets it with the BLAS threads), else the environment
  variable ``MINIDL_NUM_THREADS``, else the cores this process may run on. 1 runs every
  chunk on the caller's thread, in order.
* **Same bits at any thread count**: the callers choose their chunks by the size of the
  work, never by the thread count, and each chunk writes its own part of the result;
  sums over chunks (weight gradients) are added by the caller in chunk order
  (``sum_in_order``). Which thread ran a chunk changes nothing.
* **Work stealing without locks**: each participating thread takes the next chunk index
  from a shared counter (``next`` on an ``itertools.count`` is atomic under the GIL), so a
  thread slowed by other load takes fewer chunks.
* **Large products too**: ``chunks.gemm`` cuts a large 2-D product into blocks of output
  rows (or columns) by its size, one single-threaded BLAS call per block, so a training
  run can keep BLAS on one thread (``backend.limit_threads(n, blas=1)``) and still use
  every core for its GEMMs: then nothing busy-waits for work (OpenBLAS's idle threads
  spin) and no result depends on the thread count.
* **One BLAS thread per chunk**: while the pool runs a call's chunks, NumPy's BLAS runs
  each GEMM on the thread that calls it (``one_blas_thread``; restored afterwards), as two
  processes of one thread each would. BLAS's own threads would otherwise contend with the
  chunks' for the same cores: measured on 2 cores, AlexNet conv1's im2col input gradient
  took 112 ms on 2 chunk threads with 2 BLAS threads, 57 ms with 1, 96 ms unchunked.
  The setting is process-wide (OpenBLAS has no per-thread count), so a GEMM that another
  thread of the program runs meanwhile also gets one thread: the same result, slower.
* **Nested and concurrent calls run inline**: a ``parallel_for`` inside a chunk, or while
  another thread of the program holds the pool, runs its chunks on its own thread, in
  order; nothing waits for the pool, so nothing can deadlock on it.
* **Errors**: the first failing chunk (by index) stops the others from taking new chunks,
  and its exception is raised in the caller, with a note naming the chunk.
* **Fork**: a forked child has none of the parent's threads; the pool is forgotten in the
  child (``os.register_at_fork``) and started again on its first use there.
* Nothing starts at import: the workers are created on the first call that needs them.
"""

import contextlib
import functools
import itertools
import os
import queue
import threading

_requested = None  # set_num_threads' value; None: the environment or the cores
_local = threading.local()  # .inside: this thread is running a chunk


def default_num_threads():
    """``MINIDL_NUM_THREADS`` when set, else the cores this process may run on."""
    value = os.environ.get("MINIDL_NUM_THREADS")
    if value is not None:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(
                f"MINIDL_NUM_THREADS={value!r} is not a positive whole number; set it to the "
                "threads minidl's ops may use (e.g. 2), or unset it to use every core"
            )
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def get_num_threads():
    """The threads an op's chunks run on (``set_num_threads``, ``MINIDL_NUM_THREADS``, cores)."""
    return _requested if _requested is not None else default_num_threads()


def set_num_threads(n):
    """Run each op's chunks on ``n`` threads (None: back to ``MINIDL_NUM_THREADS`` or the
    cores). BLAS keeps its own thread count (``md.backend.limit_threads`` sets both)."""
    global _requested
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"set_num_threads: expected a positive int (or None), got {n!r}")
    _requested = n


@contextlib.contextmanager
def num_threads(n):
    """Within the block, ``set_num_threads(n)``; then back to the count before it."""
    global _requested
    before = _requested
    set_num_threads(n)
    try:
        yield
    finally:
        _requested = before


class _Job:
    """One ``parallel_for`` call: the chunks, the shared counter, the results, the errors."""

    def __init__(self, fn, chunks):
        self.fn, self.chunks = fn, chunks
        self.next_index = itertools.count()
        self.results = [None] * len(chunks)
        self.errors = {}  # chunk index -> exception
        self.done = queue.SimpleQueue()  # one token per worker when it has finished

    def work(self):
        """Take chunks until none is left or one has failed."""
        outer, _local.inside = getattr(_local, "inside", False), True
        try:
            for i in self.next_index:
                if i >= len(self.chunks) or self.errors:
                    return
                try:
                    self.results[i] = self.fn(self.chunks[i])
                except BaseException as exc:  # raised in the caller (``raise_first_error``)
                    self.errors[i] = exc
        finally:
            _local.inside = outer

    def raise_first_error(self):
        if self.errors:
            i = min(self.errors)
            exc = self.errors[i]
            exc.add_note(f"in parallel_for chunk {i} of {len(self.chunks)}: {self.chunks[i]!r}")
            raise exc


class _Pool:
    """Worker threads, each waiting on its own queue for a job; ``lock`` is held by the one
    caller that uses them at a time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.queues = []

    def run(self, job, workers):
        while len(self.queues) < workers:
            tasks = queue.SimpleQueue()
            name = f"minidl-parallel-{len(self.queues) + 1}"
            threading.Thread(target=_serve, args=(tasks,), name=name, daemon=True).start()
            self.queues.append(tasks)
        for tasks in self.queues[:workers]:
            tasks.put(job)
        try:
            job.work()
        finally:  # the workers still read the job's chunks: wait for them, even on an error
            for _ in range(workers):
                job.done.get()


def _serve(tasks):
    while True:
        job = tasks.get()
        try:
            job.work()
        finally:
            job.done.put(None)
            del job  # not kept until the next job: its chunks' arrays go back to the pool now


_pool = _Pool()


@functools.cache
def _blas_libraries():
    """The BLAS libraries loaded now (NumPy's OpenBLAS...), found once, on first use."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas").lib_controllers


@contextlib.contextmanager
def one_blas_thread():
    """Run BLAS calls on one thread (each on its caller's) inside the block."""
    libraries = _blas_libraries()
    before = [library.get_num_threads() for library in libraries]
    for library in libraries:
        library.set_num_threads(1)
    try:
        yield
    finally:
        for library, threads in zip(libraries, before):
            library.set_num_threads(threads)


def _forget_pool_after_fork():
    """In a forked child: none of the parent's threads exist, and the pool's lock may have
    been held by one of them; start afresh."""
    global _pool
    _pool = _Pool()
    _local.inside = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def parallel_for(fn, chunks, threads=None):
    """``[fn(chunk) for chunk in chunks]``, the calls spread over ``threads`` threads (None:
    ``get_num_threads()``; at most one per chunk); see the module docstring for the rules
    (order, errors, nesting, fork).

    ``fn`` must write only its own chunk's part of any shared output; it runs on worker
    threads, so it should spend its time in NumPy calls that release the GIL.
    """
    chunks = list(chunks)
    threads = min(get_num_threads() if threads is None else threads, len(chunks))
    job = _Job(fn, chunks)
    pool = _pool
    if threads <= 1 or getattr(_local, "inside", False) or not pool.lock.acquire(blocking=False):
        job.work()  # one thread, a nested call, or the pool busy with another thread's call
    else:
        try:
            with one_blas_thread():
                pool.run(job, threads - 1)
        finally:
            pool.lock.release()
    job.raise_first_error()
    return job.results


def sum_in_order(parts):
    """parts[0] + parts[1] + ... added left to right into parts[0] (in place): the fixed
    summation order of a reduction over chunks, whatever thread computed each part."""
    total = parts[0]
    for part in parts[1:]:
        total += part
    return total
