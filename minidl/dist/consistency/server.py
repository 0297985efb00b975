"""The server side of the parameter server: one rank, one shard of the master weights.

A receive is pre-posted for every worker; whichever message arrives first is served. A
push goes to the update rule, and the reply (the shard's weights) leaves once the SSP
gate (``ssp.ClockTable``) lets that worker start its next step. Between polls the server
sleeps ``poll_interval`` seconds (0: MPI's blocking waits, which busy-poll a core).

An update rule (``GradientRule``; ``averaging.ElasticRule`` for easgd) has ``version``
(updates applied), ``weights`` (the shard) and ``push(worker, clock, read_version,
payload) -> (reply or None, [(worker, staleness), ...])``.
"""

import time

import numpy as np

from minidl.backend import get_array_module, to_numpy
from minidl.dist.collectives import divide_in_place
from minidl.dist.consistency import ps
from minidl.dist.consistency.ssp import ClockedGradients, ClockTable
from minidl.perf.telemetry import RankCounters, StalenessHistogram

DEFAULT_POLL_INTERVAL = 2e-4  # seconds; chosen with benchmarks/bench_consistency.py --poll


class GradientRule:
    """Apply pushed gradients to a shard with any minidl optimizer.
    ``per_clock`` (bsp, ssp): a clock's n gradients are averaged and applied as one step
    once all arrived (``ssp.ClockedGradients``), so bsp is synchronous SGD. Else (asp)
    each push is applied on arrival as g / n (Downpour, Dean et al. 2012)."""

    def __init__(self, optimizer, compressor, workers, per_clock):
        if len(optimizer.params) != 1:
            raise ValueError("GradientRule: the optimizer must hold the one flat shard parameter")
        self.optimizer = optimizer
        self.param = optimizer.params[0]
        self.compressor = compressor
        self.workers = workers
        self.clocked = ClockedGradients(workers) if per_clock else None
        self.version = 0

    @property
    def weights(self):
        return self.param.data

    def push(self, worker, clock, read_version, payload):
        xp = get_array_module(self.param.data)
        grad = xp.asarray(self.compressor.decode(payload, self.param.size))
        if self.clocked is None:
            divide_in_place(grad, self.workers)
            applied = [(worker, self.version - read_version)]
            self._apply(grad)
            return None, applied
        applied = []
        self.clocked.add(worker, clock, read_version, grad)
        for mean, reads in self.clocked.pop_complete():
            applied += [(w, self.version - version) for w, version in reads]
            self._apply(mean)
        return None, applied

    def _apply(self, grad):
        self.param.grad = grad
        self.optimizer.step()
        self.param.grad = None
        self.version += 1

    def check_epoch_end(self):
        """Every pushed gradient must have been applied by the end of an epoch."""
        if self.clocked is not None and self.clocked.incomplete():
            raise RuntimeError(
                f"epoch ended with incomplete clocks {self.clocked.incomplete()}: "
                "every worker must take the same number of steps per epoch"
            )


class ParameterServer:
    """Serve one shard to every worker until each has said DONE (or ABORT) for the epoch;
    ``progress(where)``, when given, is told of every message served (a hang watchdog)."""

    def __init__(self, comm, layout, rule, staleness, push_capacity, poll_interval, progress=None):
        self.comm, self.layout, self.rank = comm, layout, comm.rank
        self.progress = progress
        self.rule = rule
        self.poll_interval = float(poll_interval)
        workers = layout.workers
        self.clocks = ClockTable(workers, staleness)
        self.inbox = [ps.Message(push_capacity) for _ in range(workers)]
        self.outbox = [ps.Message(4 * layout.shard_size(self.rank)) for _ in range(workers)]
        self.receives = [self._post(w) for w in range(workers)]
        self.sends = [None] * workers
        self.aborted = False
        self.counters = None

    def _post(self, worker):
        return self.comm.irecv(
            self.inbox[worker].buffer, self.layout.worker_rank(worker), tag=ps.TAG_PUSH
        )

    # ---- one epoch -------------------------------------------------------------------------
    def serve_epoch(self, tickets=None):
        """Serve until every worker ended the epoch; returns False when one aborted.
        ``tickets`` (asp, server 0): the epoch's batch count; worker w starts with batch w
        and each reply hands out the next one (``END`` when none is left)."""
        workers = self.layout.workers
        self.counters = RankCounters(
            role="server",
            rank=self.rank,
            applied=0,
            bytes_sent=0,
            bytes_received=0,
            idle_s=0.0,
            gate_wait_s=[0.0] * workers,
        )
        self.staleness = StalenessHistogram()
        self.tickets, self.next_ticket = tickets, workers
        start_version, cpu = self.rule.version, time.process_time()
        finished, self.pending = set(), {}
        while len(finished) < workers:
            for worker in self._arrivals():
                if self._handle(worker):
                    finished.add(worker)
                if self.progress is not None:
                    self.progress(f"serving worker {worker}")
            self._release()
        self.comm.wait_all([s for s in self.sends if s is not None])
        if not self.aborted:
            self.rule.check_epoch_end()
        self.counters.update(
            staleness=self.staleness.to_dict()["histogram"],
            updates=self.rule.version - start_version,
            version=self.rule.version,
            cpu_s=time.process_time() - cpu,
        )
        return not self.aborted

    def _arrivals(self):
        """Worker indices whose message has arrived (waits until there is one)."""
        start = time.perf_counter()
        if self.poll_interval <= 0:
            ready = [self.comm.wait_any(self.receives)]
        else:
            while True:
                ready = self.comm.test_some(self.receives)
                if ready:
                    break
                time.sleep(self.poll_interval)
        self.counters.add("idle_s", time.perf_counter() - start)
        return ready

    def _handle(self, worker):
        """Process worker's message and re-post its receive; True when it ended its epoch."""
        message = self.inbox[worker]
        kind, clock, read_version, _, size = message.fields()
        self.counters.add("bytes_received", ps.HEADER_BYTES + size)
        ended = kind in (ps.DONE, ps.ABORT)
        if kind == ps.ABORT:
            self.aborted = True
        elif kind == ps.PUSH:
            if clock != self.clocks.clocks[worker]:
                raise RuntimeError(
                    f"server {self.rank}: worker {worker} pushed clock {clock}, "
                    f"expected {self.clocks.clocks[worker]}"
                )
            if self.aborted:
                self._reply(worker, ps.STOP)
            else:
                reply, applied = self.rule.push(worker, clock, read_version, message.body())
                for _, staleness in applied:
                    self.staleness.add(staleness)
                self.counters.add("applied", len(applied))
                self.clocks.tick(worker)
                if reply is not None:
                    self._reply(worker, ps.OK, reply)
                else:
                    self.pending[worker] = time.perf_counter()
        elif kind != ps.DONE:
            raise RuntimeError(
                f"server {self.rank}: unknown message kind {kind} from worker {worker}"
            )
        self.receives[worker] = self._post(worker)
        return ended

    def _release(self):
        """Reply to every waiting worker whose gate is open (or that must stop or end)."""
        for worker in sorted(self.pending):
            if self.aborted:
                self._reply(worker, ps.STOP)
            elif self.tickets is not None:
                if self.next_ticket < self.tickets:
                    self._reply(worker, ps.OK, self.rule.weights, ticket=self.next_ticket)
                    self.next_ticket += 1
                else:
                    self._reply(worker, ps.END)
            elif self.clocks.may_start(self.clocks.clocks[worker]):
                self._reply(worker, ps.OK, self.rule.weights)
            else:
                continue
            self.counters["gate_wait_s"][worker] += time.perf_counter() - self.pending.pop(worker)

    def _reply(self, worker, status, payload=None, ticket=ps.NO_TICKET):
        if self.sends[worker] is not None:
            self.sends[worker].wait()  # the previous reply: the worker has pushed since
        data = self.outbox[worker].fill(
            [status, self.rule.version, ticket, 0],
            None if payload is None else np.ascontiguousarray(to_numpy(payload), dtype=np.float32),
        )
        destination = self.layout.worker_rank(worker)
        self.sends[worker] = self.comm.isend(data, destination, tag=ps.TAG_REPLY)
        self.counters.add("bytes_sent", data.nbytes)

    def close(self):
        """Withdraw the receives still posted for a next epoch that will not come."""
        for request in self.receives:
            request.cancel()
