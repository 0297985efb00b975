"""Parameter server over MPI: which rank does what, which shard is where, what a message holds.

Layout: ranks 0..K-1 are servers, ranks K..size-1 workers (worker index =
rank - K). The model's parameters, flattened into one float32 vector of P
values, are cut into K nearly equal contiguous element ranges; server k
holds range k of the master weights and runs the optimizer on it (every
update rule minidl has is element-wise, so sharding does not change the
arithmetic). A worker pushes each shard's slice of its gradient to that
shard's server and pulls the slice back (Ben-Nun & Hoefler 2019, §6.2, Fig. 26a).

Messages are one contiguous byte string each: an int64 header, then the
payload (a compressed gradient, weights, or nothing), on a ``Communicator``
of their own (``comm.dup()``), so no other traffic can match their tags.

* worker -> server (``TAG_PUSH``): [kind, clock, read_version, ticket,
  payload_bytes]; kind is ``PUSH`` (payload follows), ``DONE`` (no more
  pushes this epoch) or ``ABORT`` (the worker stopped: its loss is not finite,
  or it was told to stop).
* server -> worker (``TAG_REPLY``): [status, version, ticket, 0, payload_bytes];
  status ``OK`` (payload: the shard's weights, or the elastic difference),
  ``END`` (no batches left this epoch; no payload) or ``STOP`` (another worker
  aborted; no payload).

Every worker ends each epoch with exactly one DONE or ABORT to every server,
and sends nothing else without having received the reply to its previous
push, so a server knows when an epoch is over and no message is left
unreceived.
"""

import time

import numpy as np

from minidl.train.config import ConfigError, option

HEADER_FIELDS = 5
HEADER_BYTES = 8 * HEADER_FIELDS
TAG_PUSH, TAG_REPLY = 71, 72
PUSH, DONE, ABORT = 0, 1, 2  # worker -> server kinds
OK, END, STOP = 0, 1, 2  # server -> worker statuses
NO_TICKET = -1


class TrainingAborted(RuntimeError):
    """Another rank stopped training (its loss became NaN or infinite): this rank stops too."""


class Layout:
    """Servers are ranks 0..K-1, workers the rest; the P parameters are cut into K ranges."""

    def __init__(self, size, servers, nparams, mode="ps"):
        if servers < 1:
            raise ConfigError(f"{option('servers')} must be >= 1, got {servers}")
        if size <= servers:
            raise ConfigError(
                f"{option('dist')} {mode} with {servers} server rank(s) needs at least "
                f"{servers + 1} ranks (servers first, then workers); "
                f"start it with mpiexec -n {servers + 2} or more"
            )
        if nparams < servers:
            raise ConfigError(
                f"{option('servers')} {servers}: the model has only {nparams} parameters"
            )
        self.size, self.servers, self.workers = size, servers, size - servers
        self.nparams = nparams
        self.bounds = [k * nparams // servers for k in range(servers + 1)]

    def is_server(self, rank):
        return rank < self.servers

    def worker_index(self, rank):
        """0-based worker number of a worker rank."""
        if self.is_server(rank):
            raise ValueError(f"rank {rank} is a server, not a worker")
        return rank - self.servers

    def worker_rank(self, worker):
        return self.servers + worker

    def shard(self, k):
        """The element range of server k's shard."""
        return slice(self.bounds[k], self.bounds[k + 1])

    def shard_size(self, k):
        return self.bounds[k + 1] - self.bounds[k]


class Message:
    """A byte buffer holding a header and up to ``capacity`` payload bytes."""

    def __init__(self, capacity):
        self.buffer = np.zeros(HEADER_BYTES + capacity, dtype=np.uint8)
        self.header = self.buffer[:HEADER_BYTES].view(np.int64)
        self.payload = self.buffer[HEADER_BYTES:]

    def fill(self, fields, payload=None):
        """Write the header (payload size last) and the payload; returns the bytes to send."""
        size = 0 if payload is None else payload.nbytes
        self.header[: HEADER_FIELDS - 1] = fields
        self.header[HEADER_FIELDS - 1] = size
        if size:
            self.payload[:size] = payload.reshape(-1).view(np.uint8)
        return self.buffer[: HEADER_BYTES + size]

    def fields(self):
        """The header as Python ints."""
        return [int(v) for v in self.header]

    def body(self):
        """The payload bytes the header announces."""
        return self.payload[: int(self.header[HEADER_FIELDS - 1])]


def wait_all(comm, requests, poll_interval):
    """Complete every request of ``comm``; returns the seconds spent waiting.

    ``poll_interval`` 0 waits inside MPI, which busy-polls a core; a positive
    interval tests and sleeps in between, leaving the core to the ranks that compute.
    """
    start = time.perf_counter()
    if poll_interval <= 0:
        comm.wait_all(requests)
    else:
        while not comm.test_all(requests):
            time.sleep(poll_interval)
    return time.perf_counter() - start


def wait_for_everyone(comm, poll_interval):
    """Return once every rank of ``comm`` called this (a barrier that sleeps while it waits).

    Put before a blocking collective, it moves the wait for late ranks out of
    the collective, where MPI would busy-poll a core.
    """
    return wait_all(comm, [comm.ibarrier()], poll_interval)
