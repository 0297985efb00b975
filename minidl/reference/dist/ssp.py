"""Stale synchronous parallel (SSP): worker clocks and the gate.

Ho et al. 2013, "More Effective Distributed ML via a Stale Synchronous
Parallel Parameter Server": every worker p keeps a clock c_p, the number of
iterations (gradient pushes) it has completed. A worker whose clock is c may
start its next iteration only while the slowest worker is at most S clocks
behind it:

    min_p c_p >= c - S

so the weights it then reads hold every update of clocks <= c - S - 1.
S = 0 is bulk-synchronous parallel (BSP): every worker waits for all others
at every clock. No bound (``staleness=None``) is asynchronous parallel (ASP,
Downpour SGD in Dean et al. 2012): the gate is always open.

``WorkerClocks`` has the interface of the tuned ``minidl.dist.consistency.ssp.ClockTable``
(``clocks``, ``tick``, ``may_start``), so either can drive a parameter server.

An exercise region here must not call the tuned ``ClockTable``
(``minidl.dist.consistency.ssp``): the check fails one that does, since the exercise is to
write the algorithm out.
"""


class WorkerClocks:
    """The clock of each of ``workers`` workers and the SSP gate with bound ``staleness``."""

    def __init__(self, workers, staleness):
        if staleness is not None and (int(staleness) != staleness or staleness < 0):
            raise ValueError(
                f"SSP staleness must be an integer >= 0, or None for asp; got {staleness!r}"
            )
        self.clocks = [0] * int(workers)
        self.staleness = staleness

    def tick(self, worker):
        """Worker ``worker`` completed one more iteration; returns its clock."""
        self.clocks[worker] += 1
        return self.clocks[worker]

    def may_start(self, clock):
        """True when a worker at clock ``clock`` may start its next iteration: min c_p >= c - S."""
        # BEGIN EXERCISE 8.1
        if self.staleness is None:
            return True
        return min(self.clocks) >= clock - self.staleness
        # END EXERCISE 8.1
