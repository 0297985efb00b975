"""Stale-synchronous parallel bookkeeping: worker clocks, the gate, per-clock gradient sets.

SSP (Ho et al. 2013): a worker's clock c counts the gradients it pushed; it may compute
step c only while the slowest worker's clock is >= c - S. S = 0 is BSP, no bound
(``staleness=None``) is ASP.

A clock is applied only once complete: its n gradients are averaged (in worker order) as
one step, version c -> c + 1. Reads see exactly the completed clocks, which Ho et al.
allow ("all updates from clocks <= c - S - 1, maybe more"); in exchange ssp:0 is exactly
synchronous minibatch SGD with n times the batch, and every update's staleness (version
at apply minus version read) is at most S.
"""

from minidl.backend import get_array_module
from minidl.dist.collectives import divide_in_place


def check_staleness(staleness):
    """``staleness`` if it is None or an integer >= 0, else a clear error."""
    if staleness is not None and (int(staleness) != staleness or staleness < 0):
        raise ValueError(
            f"SSP staleness must be an integer >= 0 (or None for asp), got {staleness!r}"
        )
    return staleness


class ClockTable:
    """The clock of every worker and the SSP gate."""

    def __init__(self, workers, staleness):
        self.staleness = check_staleness(staleness)
        self.clocks = [0] * int(workers)

    def tick(self, worker):
        """Worker ``worker`` pushed one more gradient; returns its new clock."""
        self.clocks[worker] += 1
        return self.clocks[worker]

    @property
    def min_clock(self):
        """The slowest worker's clock."""
        return min(self.clocks)

    def may_start(self, clock):
        """True when a worker may compute step ``clock``: min clock >= clock - S."""
        return self.staleness is None or self.min_clock >= clock - self.staleness


class ClockedGradients:
    """Gradients waiting for their clock to complete; complete clocks come out averaged.
    ``pop_complete()`` yields ``(mean_gradient, [(worker, read_version), ...])`` per
    complete clock, in clock order: summed in worker order, then divided by n as
    ``allreduce(op="mean")`` divides (so n = 2 matches it bit for bit)."""

    def __init__(self, workers):
        self.workers = int(workers)
        self.pending = {}  # clock -> {worker: (read_version, grad)}
        self.next_clock = 0

    def add(self, worker, clock, read_version, grad):
        entries = self.pending.setdefault(clock, {})
        if worker in entries:
            raise RuntimeError(f"worker {worker} pushed clock {clock} twice")
        entries[worker] = (read_version, grad.copy())

    def pop_complete(self):
        while len(self.pending.get(self.next_clock, ())) == self.workers:
            entries = self.pending.pop(self.next_clock)
            total = entries[0][1]
            for worker in range(1, self.workers):
                get_array_module(total).add(total, entries[worker][1], out=total)
            divide_in_place(total, self.workers)
            self.next_clock += 1
            yield total, [(w, entries[w][0]) for w in range(self.workers)]

    def incomplete(self):
        """Clocks that some worker pushed but not all (must be none at the end of an epoch)."""
        return sorted(self.pending)
