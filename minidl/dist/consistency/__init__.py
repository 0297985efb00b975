"""Training under a consistency model: a session per rank for each mode but sync.

Modes (Ben-Nun & Hoefler 2019, §6.1 and §6.4.2; Viviani, Drocco & Aldinucci 2018):

* ``bsp`` (= ``ssp:0``), ``ssp:S``, ``asp``: parameter servers (ranks 0..K-1) hold the
  weights and run the optimizer; workers push gradients and pull weights. ssp:S bounds
  staleness by S clocks (Ho et al. 2013); asp never waits (Downpour, Dean et al. 2012)
  and takes batches from a shared queue, so a fast worker does more of the epoch.
* ``avg:H``: local SGD on every rank, weights averaged by allreduce every H steps.
* ``easgd[:ALPHA[:TAU]]``: asynchronous elastic averaging with a center variable on the
  server(s) (Zhang et al. 2015); defaults alpha = 0.9 / n, tau = 4.

Workers train with ``session.optimizer`` on ``session.train_loader(...)``, servers serve
(``run_epoch``); ``finish_epoch`` (collective) agrees on whether anyone stopped, loads the
consensus model (servers' weights, center, or replicas' average) and gathers the counters.
"""

import time

import numpy as np

from minidl.data import DataLoader
from minidl.dist.compression import Compressor
from minidl.dist.consistency.averaging import ElasticAveragingOptimizer, ElasticRule, ModelAveraging
from minidl.dist.consistency.ps import NO_TICKET, Layout, TrainingAborted, wait_for_everyone
from minidl.dist.consistency.server import GradientRule, ParameterServer
from minidl.dist.consistency.worker import ParameterServerOptimizer, ServerLink, TicketBatches
from minidl.dist.data_parallel import FlatBuffer
from minidl.layers import Parameter

EASGD_BETA = 0.9  # alpha = EASGD_BETA / workers unless given (Zhang et al. 2015)


def make_session(options, comm, model, make_optimizer, seed=0, progress=None):
    """The session of this rank for ``options.mode`` (a ``DistConfig``'s; not sync).
    ``make_optimizer(params)`` builds the update rule; ``seed`` seeds random rounding of
    compressed gradients; ``progress(where)``: told of each message a server serves."""
    mode = options.mode
    if mode.uses_server:
        return ParameterServerSession(options, comm, model, make_optimizer, seed, progress)
    if mode.name == "avg":
        return AveragingSession(options, comm, model, make_optimizer)
    raise ValueError(f"dist mode {mode.text}: not a session mode (sync uses DistributedOptimizer)")


class _Session:
    """What every mode shares: the model as one vector, the epoch's training, the gather."""

    is_server = False

    def __init__(self, mode, comm, model):
        self.mode, self.comm, self.model = mode, comm, model
        self.buffer = FlatBuffer(list(model.parameters()))
        comm.bcast(self.buffer.gather_weights(), root=0)  # every replica starts from rank 0's
        self.buffer.scatter_weights()
        self.local = None  # a worker's own weights while the consensus is being evaluated

    @staticmethod
    def _loader(dataset, batch_size, seed, transform, rank, world_size):
        """A worker's fixed shard of every epoch's batches."""
        return DataLoader(
            dataset, batch_size, True, seed, rank=rank, world_size=world_size, transform=transform
        )

    def run_epoch(self, train):
        """Train with ``train()`` -> stats (plus this process's ``cpu_seconds``); returns
        (stats or None, stopped)."""
        cpu = time.process_time()
        try:
            stats = train()
        except TrainingAborted:
            self.optimizer.abandon()
            return None, True
        return dict(stats, cpu_seconds=time.process_time() - cpu), False

    def _gather(self, counters):
        return self.comm.allgather_object(dict(counters))

    def _hold_consensus(self, consensus, keep_local):
        """Load ``consensus`` into the model; with ``keep_local``, until ``restore_local()``."""
        if keep_local:
            self.local = self.buffer.gather_weights().copy()
        self.buffer.scatter_weights(consensus)

    def restore_local(self):
        """Put back the worker's own weights after evaluating the consensus (avg, easgd)."""
        if self.local is not None:
            self.buffer.scatter_weights(self.local)
            self.local = None

    def close(self):
        """Nothing to release (a server withdraws its pending receives)."""


def _worker_counters(stats, counters, rank, lr):
    """A worker's epoch record: its link/averaging counters and its training sums."""
    record = dict(counters, role="worker", rank=rank, lr=lr)
    if stats is not None:
        record.update(
            cpu_s=stats["cpu_seconds"],
            loss_sum=stats["loss"] * stats["images"],
            correct=stats["acc"] * stats["images"],
            images=stats["images"],
            seconds=stats["seconds"],
            compute_s=stats.get("compute_seconds", 0.0),
            slept_s=stats.get("slept_seconds", 0.0),
        )
    return record


def global_train_stats(records):
    """Loss, accuracy and images over all workers, from the gathered records."""
    workers = [r for r in records if r["role"] == "worker"]
    images = sum(r.get("images", 0) for r in workers)
    seconds = max((r.get("seconds", 0.0) for r in workers), default=0.0)
    return {
        "loss": sum(r.get("loss_sum", 0.0) for r in workers) / max(images, 1),
        "acc": sum(r.get("correct", 0.0) for r in workers) / max(images, 1),
        "images": images,
        "seconds": seconds,
        "images_per_s": images / seconds if seconds else 0.0,
    }


class ParameterServerSession(_Session):
    """bsp / ssp:S / asp / easgd on one rank: a server of one shard, or a worker."""

    def __init__(self, options, comm, model, make_optimizer, seed=0, progress=None):
        mode, poll_interval = options.mode, options.poll_interval
        super().__init__(mode, comm, model)
        self.layout = layout = Layout(comm.size, options.servers, self.buffer.size, mode.text)
        compressor = options.compressor or Compressor()
        elastic = mode.name == "easgd"
        push_capacity = [
            4 * layout.shard_size(k) if elastic else compressor.wire_bytes(layout.shard_size(k))
            for k in range(layout.servers)
        ]
        self.protocol = comm.dup()  # the protocol's messages never meet other traffic
        self.poll_interval = poll_interval
        rank = comm.rank
        self.is_server = layout.is_server(rank)
        self.tickets = None
        self.schedulable = None  # the optimizer an LR schedule drives on this rank
        self.optimizer = None
        if self.is_server:
            shard = self.buffer.flat[layout.shard(rank)].copy()
            if elastic:
                alpha = mode.alpha if mode.alpha is not None else EASGD_BETA / layout.workers
                rule = ElasticRule(shard, alpha)
            else:
                self.schedulable = make_optimizer([Parameter(shard)])
                per_clock = mode.staleness is not None
                rule = GradientRule(self.schedulable, compressor, layout.workers, per_clock)
            self.server = ParameterServer(
                self.protocol,
                layout,
                rule,
                mode.staleness,
                push_capacity[rank],
                poll_interval,
                progress,
            )
            return
        link = ServerLink(self.protocol, layout, push_capacity, poll_interval)
        params = list(model.parameters())
        if elastic:
            self.schedulable = make_optimizer(params)
            self.optimizer = ElasticAveragingOptimizer(self.schedulable, link, mode.period)
        else:
            self.optimizer = ParameterServerOptimizer(
                params, link, compressor, options.error_feedback, seed
            )

    @property
    def worker(self):
        """This rank's worker index (a server takes worker 0's batches, unused)."""
        return 0 if self.is_server else self.layout.worker_index(self.comm.rank)

    def train_loader(self, dataset, batch_size, seed=0, transform=None):
        """This worker's batches: its fixed shard, or (asp) the shared queue's."""
        workers = self.layout.workers
        if self.mode.name != "asp":
            return self._loader(dataset, batch_size, seed, transform, self.worker, workers)
        loader = TicketBatches(
            dataset, batch_size, workers, self.optimizer, seed, transform, self.worker
        )
        self.tickets = loader.tickets
        return loader

    def run_epoch(self, train):
        """Serve, or train with ``train()`` -> stats; returns (stats or None, stopped)."""
        if self.is_server:
            tickets = self.tickets if self.comm.rank == 0 else None
            return None, not self.server.serve_epoch(tickets)
        asp_first = self.tickets is not None and self.worker < self.tickets
        self.optimizer.begin_epoch(self.worker if asp_first else NO_TICKET)
        stats, stopped = super().run_epoch(train)
        if not stopped:
            self.optimizer.end_epoch()
        return stats, stopped

    def finish_epoch(self, stats, stopped, lr=None):
        """Collective: None if any rank stopped, else every rank's counters (with its ``lr``),
        the consensus loaded."""
        flag = np.array([1.0 if stopped else 0.0])
        if self.poll_interval > 0:  # ranks done early sleep instead of spinning in MPI
            wait_for_everyone(self.comm, self.poll_interval)
        if self.comm.allreduce(flag, op="sum")[0] > 0:
            return None
        consensus = self.buffer.flat.copy()
        if self.is_server:
            consensus[self.layout.shard(self.comm.rank)] = self.server.rule.weights
        for k in range(self.layout.servers):
            self.comm.bcast(consensus[self.layout.shard(k)], root=k)
        if self.is_server:
            records = self._gather(dict(self.server.counters, lr=lr))
        else:
            records = self._gather(
                _worker_counters(stats, self.optimizer.link.counters, self.comm.rank, lr)
            )
            self.optimizer.link.counters.clear()
            self.optimizer.versions = [r["version"] for r in records if r["role"] == "server"]
        self._hold_consensus(consensus, keep_local=self.mode.name == "easgd" and not self.is_server)
        return records

    def close(self):
        if self.is_server:
            self.server.close()


class AveragingSession(_Session):
    """avg:H on one rank: every rank a worker, no server."""

    def __init__(self, options, comm, model, make_optimizer):
        super().__init__(options.mode, comm, model)
        self.schedulable = make_optimizer(list(model.parameters()))
        self.optimizer = ModelAveraging(
            self.schedulable, comm, options.mode.period, options.allreduce, options.poll_interval
        )

    def train_loader(self, dataset, batch_size, seed=0, transform=None):
        return self._loader(dataset, batch_size, seed, transform, self.comm.rank, self.comm.size)

    def finish_epoch(self, stats, stopped, lr=None):
        """Collective (the replicas' average); None if any rank stopped."""
        if self.optimizer.stopped:
            return None
        try:
            consensus = self.optimizer.average().copy()
        except TrainingAborted:
            return None
        records = self._gather(_worker_counters(stats, self.optimizer.counters, self.comm.rank, lr))
        self.optimizer.counters.clear()
        self._hold_consensus(consensus, keep_local=True)
        return records
