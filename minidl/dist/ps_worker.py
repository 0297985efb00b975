"""The worker side of the parameter server: push a gradient, wait for the weights.

``ServerLink`` talks to every shard (one push and one reply per shard and
step; waits poll and sleep like the server). ``ParameterServerOptimizer``
is what the training loop sees as its optimizer: ``step()`` flattens the
gradients, compresses each shard's slice (optionally, with error feedback),
pushes, waits at the SSP gate for the reply and loads the new weights into
the model. The update rule itself runs on the servers.

``TicketBatches`` is asp's shared batch queue: instead of a fixed shard of
the data, each reply from server 0 names the next unclaimed batch of the
epoch (same global order and cuts as ``DataLoader``), so a fast worker
processes more batches than a slow one and no batch is processed twice.
"""

import numpy as np

from minidl.backend import get_array_module
from minidl.data import DataLoader
from minidl.dist.compression import Compressor, GradientEncoder
from minidl.dist.flat import FlatBuffer
from minidl.dist.ps import (
    ABORT,
    DONE,
    END,
    HEADER_BYTES,
    NO_TICKET,
    PUSH,
    STOP,
    TAG_PUSH,
    TAG_REPLY,
    Message,
    TrainingAborted,
    wait_all,
)
from minidl.dist.ps_server import DEFAULT_POLL_INTERVAL
from minidl.dist.telemetry import RankCounters


class ServerLink:
    """One worker's messages to and from the K servers."""

    def __init__(self, comm, layout, rank, push_capacity, poll_interval=DEFAULT_POLL_INTERVAL):
        self.comm, self.layout, self.rank = comm, layout, rank
        self.poll_interval = float(poll_interval)
        self.outbox = [Message(push_capacity[k]) for k in range(layout.servers)]
        self.inbox = [Message(4 * layout.shard_size(k)) for k in range(layout.servers)]
        self.counters = RankCounters()

    def exchange(self, clock, versions, ticket, payloads):
        """Push ``payloads[k]`` to server k; wait for every reply; returns the reply headers.

        Each header is [status, version, ticket, 0, payload_bytes]; the payloads
        are in ``self.inbox[k].body()``.
        """
        requests = [
            self.comm.irecv(self.inbox[k].buffer, k, tag=TAG_REPLY)
            for k in range(self.layout.servers)
        ]
        for k, payload in enumerate(payloads):
            data = self.outbox[k].fill([PUSH, clock, versions[k], ticket], payload)
            requests.append(self.comm.isend(data, k, tag=TAG_PUSH))
            self.counters.add("bytes_sent", data.nbytes)
        self.counters.add("wait_s", wait_all(self.comm, requests, self.poll_interval))
        headers = [message.fields() for message in self.inbox]
        self.counters.add("bytes_received", sum(HEADER_BYTES + h[-1] for h in headers))
        return headers

    def finish(self, kind=DONE):
        """Tell every server this worker's epoch is over (DONE) or that it stopped (ABORT)."""
        requests = []
        for k in range(self.layout.servers):
            data = self.outbox[k].fill([kind, -1, -1, NO_TICKET])
            requests.append(self.comm.isend(data, k, tag=TAG_PUSH))
            self.counters.add("bytes_sent", data.nbytes)
        wait_all(self.comm, requests, self.poll_interval)


class ServerClient:
    """Epoch bookkeeping of an optimizer that talks to the servers through ``self.link``."""

    def _connect(self, link):
        self.link = link
        self.versions = [0] * link.layout.servers  # of the weights this worker holds, per shard
        self.clock = 0  # pushes so far
        self.ticket = NO_TICKET
        self.ended = False  # server 0 said END: no batch left this epoch
        self.finished = False  # DONE or ABORT sent for this epoch

    def begin_epoch(self, ticket=NO_TICKET, versions=None):
        """Start an epoch (with asp's first batch ``ticket``, and the servers' ``versions``)."""
        self.ticket, self.ended, self.finished = ticket, False, False
        if versions is not None:
            self.versions = list(versions)

    def push(self, payloads):
        """Push one payload per shard and wait for the replies; raises if told to stop."""
        headers = self.link.exchange(self.clock, self.versions, self.ticket, payloads)
        self.clock += 1
        if any(h[0] == STOP for h in headers):
            self.abandon()
            raise TrainingAborted("another worker stopped training (its loss was not finite)")
        return headers

    def end_epoch(self):
        """Say DONE to every server (once)."""
        if not self.finished:
            self.finished = True
            self.link.finish(DONE)

    def abandon(self):
        """Say ABORT to every server (once): this worker stops, the others will be stopped."""
        if not self.finished:
            self.finished = True
            self.link.finish(ABORT)


class ParameterServerOptimizer(ServerClient):
    """A worker's optimizer for bsp / ssp:S / asp: ``step()`` = push gradient, pull weights.

    The gradient pushed is the local mean gradient times ``set_batch_weight``'s
    weight (as in ``DistributedOptimizer``), so that the server's average of
    the n pushes of a clock is the mean gradient over the global batch.
    """

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
                compressor, layout.shard_size(k), error_feedback, seed=[seed, link.rank, k], xp=xp
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
        layout = self.link.layout
        headers = self.push(
            [encoder.encode(grad[layout.shard(k)])[0] for k, encoder in enumerate(self.encoders)]
        )
        self.link.counters.add("gradients", 1)
        if headers[0][0] == END:
            self.ticket, self.ended = NO_TICKET, True
            return
        self.ticket = headers[0][2]
        xp = get_array_module(self.buffer.flat)
        for k, header in enumerate(headers):
            self.versions[k] = header[1]
            self.buffer.flat[layout.shard(k)] = xp.asarray(
                self.link.inbox[k].body().view(np.float32)
            )
        self.buffer.scatter_weights()


class TicketBatches:
    """asp's batches: the one server 0 assigned, until it says END.

    Batch (ticket) k of an epoch is what rank k % n of an n-worker
    ``DataLoader`` takes at step k // n, so the epoch covers every sample once
    whoever takes which batch.
    """

    def __init__(
        self,
        dataset,
        batch_size,
        workers,
        optimizer,
        shuffle=True,
        seed=0,
        transform=None,
        worker=0,
    ):
        self.parts = [
            DataLoader(dataset, batch_size, shuffle=shuffle, seed=seed, rank=r, world_size=workers)
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
        while not self.optimizer.ended and self.optimizer.ticket != NO_TICKET:
            step, part = divmod(self.optimizer.ticket, self.workers)
            index = plans[part][step]
            self._global_count = self.parts[0].global_batch_size(step)
            x, y = np.take(self.images, index, axis=0), np.take(self.labels, index, axis=0)
            if self.transform is not None:
                x, y = self.transform(x, y, rng)
            yield x, y
