"""The worker side of the parameter server: push a gradient, wait for the weights.

``ParameterServerOptimizer.step()`` pushes each shard's slice of the (optionally
compressed) gradient through ``ServerLink``, waits at the SSP gate for the replies and
loads the new weights. ``TicketBatches`` is asp's shared batch queue: each reply from
server 0 names the next unclaimed batch, so a fast worker does more and none is done twice.
"""

import numpy as np

from minidl.backend import get_array_module
from minidl.data import DataLoader
from minidl.dist.compression import Compressor, GradientEncoder
from minidl.dist.consistency import ps
from minidl.dist.data_parallel import FlatBuffer
from minidl.perf.telemetry import RankCounters


class ServerLink:
    """One worker's messages to and from the K servers."""

    def __init__(self, comm, layout, push_capacity, poll_interval):
        self.comm, self.layout, self.rank = comm, layout, comm.rank
        self.poll_interval = float(poll_interval)
        self.outbox = [ps.Message(push_capacity[k]) for k in range(layout.servers)]
        self.inbox = [ps.Message(4 * layout.shard_size(k)) for k in range(layout.servers)]
        self.counters = RankCounters()

    def _send(self, k, fields, payload=None):
        data = self.outbox[k].fill(fields, payload)
        self.counters.add("bytes_sent", data.nbytes)
        return self.comm.isend(data, k, tag=ps.TAG_PUSH)

    def exchange(self, clock, versions, ticket, payloads):
        """Push ``payloads[k]`` to server k; wait for every reply; returns the reply headers,
        each [status, version, ticket, 0, payload_bytes] (payloads: ``inbox[k].body()``)."""
        requests = [
            self.comm.irecv(message.buffer, k, tag=ps.TAG_REPLY)
            for k, message in enumerate(self.inbox)
        ]
        for k, payload in enumerate(payloads):
            requests.append(self._send(k, [ps.PUSH, clock, versions[k], ticket], payload))
        self.counters.add("wait_s", ps.wait_all(self.comm, requests, self.poll_interval))
        headers = [message.fields() for message in self.inbox]
        self.counters.add("bytes_received", sum(ps.HEADER_BYTES + h[-1] for h in headers))
        return headers

    def finish(self, kind=ps.DONE):
        """Tell every server this worker's epoch is over (DONE) or that it stopped (ABORT)."""
        fields = [kind, -1, -1, ps.NO_TICKET]
        requests = [self._send(k, fields) for k in range(self.layout.servers)]
        ps.wait_all(self.comm, requests, self.poll_interval)


class ServerClient:
    """Epoch bookkeeping of an optimizer that talks to the servers through ``self.link``."""

    def _connect(self, link):
        self.link = link
        self.versions = [0] * link.layout.servers  # of the weights this worker holds, per shard
        self.clock = 0  # pushes so far
        self.ticket = ps.NO_TICKET
        self.ended = False  # server 0 said END: no batch left this epoch
        self.finished = False  # DONE or ABORT sent for this epoch

    def begin_epoch(self, ticket=ps.NO_TICKET):
        """Start an epoch (with asp's first batch ``ticket``)."""
        self.ticket, self.ended, self.finished = ticket, False, False

    def push(self, payloads):
        """Push one payload per shard and wait for the replies; raises if told to stop."""
        headers = self.link.exchange(self.clock, self.versions, self.ticket, payloads)
        self.clock += 1
        if any(h[0] == ps.STOP for h in headers):
            self.abandon()
            raise ps.TrainingAborted("another worker stopped training (its loss was not finite)")
        return headers

    def end_epoch(self, kind=ps.DONE):
        """Say DONE (or ``kind``) to every server, once per epoch."""
        if not self.finished:
            self.finished = True
            self.link.finish(kind)

    def abandon(self):
        """Say ABORT to every server (once): this worker stops, the others will be stopped."""
        self.end_epoch(ps.ABORT)

    def _replies(self, headers):
        """(shard slice, float32 payload) of each reply; records the shard versions they carry."""
        xp = get_array_module(self.buffer.flat)
        for k, header in enumerate(headers):
            self.versions[k] = header[1]
            yield self.link.layout.shard(k), xp.asarray(self.link.inbox[k].body().view(np.float32))


class ParameterServerOptimizer(ServerClient):
    """A worker's optimizer for bsp / ssp:S / asp: ``step()`` = push gradient, pull weights.
    The pushed gradient is weighted by ``set_batch_weight``, so that the server's average
    of a clock's n pushes is the mean gradient over the global batch."""

    def __init__(self, params, link, compression=None, error_feedback=None, seed=0):
        self.params = list(params)
        self.buffer = FlatBuffer(self.params)
        layout = link.layout
        if self.buffer.size != layout.nparams:
            raise ValueError(
                f"ParameterServerOptimizer: the model has {self.buffer.size} "
                f"values, the layout {layout.nparams}"
            )
        self._connect(link)
        compressor = compression or Compressor()
        xp = get_array_module(self.buffer.flat)
        self.encoders = [
            GradientEncoder(
                compressor, layout.shard_size(k), error_feedback, [seed, link.rank, k], xp
            )
            for k in range(layout.servers)
        ]
        self._weight = 1.0

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def set_batch_weight(self, local_count, global_count):
        """Weight the next gradient by local_count * n / global_count (see DistributedOptimizer)."""
        self._weight = local_count * self.link.layout.workers / max(global_count, 1)

    def step(self):
        """Push this step's gradient to every shard and load the weights the servers send back."""
        grad = self.buffer.gather_grads(self._weight)
        self._weight = 1.0
        shards = [grad[self.link.layout.shard(k)] for k in range(len(self.encoders))]
        headers = self.push([encoder.encode(g)[0] for encoder, g in zip(self.encoders, shards)])
        self.link.counters.add("gradients", 1)
        if headers[0][0] == ps.END:
            self.ticket, self.ended = ps.NO_TICKET, True
            return
        self.ticket = headers[0][2]
        for shard, weights in self._replies(headers):
            self.buffer.flat[shard] = weights
        self.buffer.scatter_weights()


class TicketBatches:
    """asp's batches: the one server 0 assigned, until it says END. Ticket k is what rank
    k % n of an n-worker ``DataLoader`` takes at step k // n: every sample once per epoch."""

    def __init__(self, dataset, batch_size, workers, optimizer, seed=0, transform=None, worker=0):
        self.parts = [
            DataLoader(dataset, batch_size, shuffle=True, seed=seed, rank=r, world_size=workers)
            for r in range(workers)
        ]
        self.images = np.ascontiguousarray(dataset.images, dtype=np.float32)
        self.labels = np.ascontiguousarray(dataset.labels, dtype=np.int64)
        self.workers, self.optimizer, self.transform = workers, optimizer, transform
        self.seed, self.worker = seed, worker
        self.epoch = 0
        self._global_count = 0

    @property
    def tickets(self):
        """Batches per epoch: steps of the n-worker layout times n."""
        return len(self.parts[0]) * self.workers

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def global_batch_size(self, step=None):
        """The global batch size of the batch last yielded (``step`` is ignored)."""
        return self._global_count

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        plans = [part.rank_indices(epoch) for part in self.parts]
        rng = np.random.default_rng([self.seed, epoch, self.worker]) if self.transform else None
        while not self.optimizer.ended and self.optimizer.ticket != ps.NO_TICKET:
            step, part = divmod(self.optimizer.ticket, self.workers)
            index = plans[part][step]
            self._global_count = self.parts[0].global_batch_size(step)
            x, y = np.take(self.images, index, axis=0), np.take(self.labels, index, axis=0)
            if self.transform is not None:
                x, y = self.transform(x, y, rng)
            yield x, y
