"""Which thread count trains a model fastest here: measured, not assumed.

A second thread pays where a step's work is large enough to split (AlexNet's GEMMs); on a
small model (LeNet-5 at batch 64) handing chunks to another thread can cost more than it
saves. ``fastest_threads`` times a step at each candidate count, alternating rounds so that
other load on the machine falls on every count alike (three for a step under 0.2 s, one
for a longer one), and returns the fastest; a step slower than ``budget_s`` at the most
threads is left at the most (timing it again would cost more than it could save). BLAS runs
on one thread throughout, as in training (``chunks.gemm`` spreads the large products), so
the choice changes the speed and never the bits.
"""

import statistics
import time

from ..backend import limit_threads
from ..parallel import num_threads


def fastest_threads(step, counts, budget_s=5.0):
    """(the count of ``counts`` whose median step time is least, {count: median seconds});
    ``step()`` runs one step. The last count is the default and the one kept when a step
    takes longer than ``budget_s`` (then only that count is timed)."""
    most = counts[-1]
    with num_threads(most), limit_threads(most, blas=1):
        step()  # warm-up: buffers, plans
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
    if first > budget_s or len(counts) == 1:
        return most, {most: first}
    times = {n: [] for n in counts}
    for _ in range(3 if first < 0.2 else 1):
        for n in counts:
            with num_threads(n), limit_threads(n, blas=1):
                start = time.perf_counter()
                step()
                times[n].append(time.perf_counter() - start)
    medians = {n: statistics.median(t) for n, t in times.items()}
    return min(counts, key=lambda n: (medians[n], -n)), medians
