"""Model consolidation: periodic model averaging (avg:H) and elastic averaging SGD (easgd).

**avg:H** (local SGD; Ben-Nun & Hoefler 2019, §6.4.2): every rank runs its own optimizer
on its shard of the data and, every H steps, the replicas become their average
w <- (1/n) sum_i w_i (one allreduce). With plain SGD and H = 1 this is synchronous SGD.

**easgd** (Zhang, Choromanska & LeCun 2015, Algorithm 1, asynchronous): a center
variable x~ lives on the parameter server(s); each worker takes local steps and, after
the update of every tau-th step, makes the elastic exchange, atomically on the server:

    d   = alpha (x_i - x~)
    x_i <- x_i - d
    x~  <- x~ + d

so x_i + x~ is unchanged. alpha = eta rho in the paper, which suggests beta = n alpha ~ 0.9.
Evaluation and checkpoints use the center.
"""

import time

import numpy as np

from minidl.backend import get_array_module
from minidl.dist.consistency.ps import TrainingAborted, wait_for_everyone
from minidl.dist.consistency.worker import ServerClient
from minidl.dist.data_parallel import FlatBuffer, OptimizerWrapper
from minidl.perf.telemetry import RankCounters


def elastic_difference(local, center, alpha):
    """d = alpha (x_i - x~): what moves from the worker to the center in one exchange."""
    return alpha * (local - center)


class _LocalSteps(OptimizerWrapper):
    """A worker's own optimizer (a subclass extends its ``step()``); the weights as one vector."""

    def __init__(self, optimizer, period, name):
        super().__init__(optimizer)
        if int(period) < 1:
            raise ValueError(f"{name} must be >= 1, got {period}")
        self.period = int(period)
        self.buffer = FlatBuffer(list(optimizer.params))
        self.steps = 0

    def _local_step(self, counters):
        """The wrapped optimizer's step; True when an exchange is due after it."""
        self.optimizer.step()
        self.steps += 1
        counters.add("gradients", 1)
        return self.steps % self.period == 0


class ModelAveraging(_LocalSteps):
    """avg:H: the local optimizer's step, and every ``period`` steps the replicas' average.
    The averaged vector carries a stop flag, so a rank whose loss became NaN stops every
    rank at the next average. An early rank sleeps in a barrier polled every
    ``poll_interval`` seconds (0: busy-polls in the allreduce)."""

    def __init__(self, optimizer, comm, period, algorithm, poll_interval):
        super().__init__(optimizer, period, "avg:H: the period H")
        self.comm, self.algorithm = comm, algorithm
        self.poll_interval = float(poll_interval)
        xp = get_array_module(self.buffer.flat)
        self.message = xp.empty(self.buffer.size + 1, dtype=self.buffer.flat.dtype)
        self.counters = RankCounters()
        self.stopped = False

    def step(self):
        if self._local_step(self.counters):
            self.buffer.scatter_weights(self.average())

    def average(self, stop=False):
        """The replicas' mean weights (a view of the message buffer); raises if a rank stopped."""
        self.message[:-1] = self.buffer.gather_weights()
        self.message[-1] = 1.0 if stop else 0.0
        start = time.perf_counter()
        if self.poll_interval > 0:
            wait_for_everyone(self.comm, self.poll_interval)
        self.comm.allreduce(self.message, op="mean", algorithm=self.algorithm)
        self.counters.add("wait_s", time.perf_counter() - start)
        self.counters.add("bytes_sent", self.message.nbytes)
        self.counters.add("updates", 1)
        if float(self.message[-1]) > 0:
            self.stopped = True
            if not stop:
                raise TrainingAborted("another rank stopped training (its loss was not finite)")
        return self.message[:-1]

    def abandon(self):
        """Join the next average with the stop flag set (once), so every rank stops."""
        if not self.stopped:
            self.average(stop=True)


class ElasticRule:
    """The server's half of the EASGD exchange on its shard of the center variable."""

    def __init__(self, center, alpha):
        self.center = center
        self.alpha = float(alpha)
        self.version = 0

    @property
    def weights(self):
        return self.center

    def push(self, worker, clock, read_version, payload):
        xp = get_array_module(self.center)
        local = xp.asarray(payload.view(np.float32))
        difference = elastic_difference(local, self.center, self.alpha).astype(np.float32)
        self.center += difference
        staleness = self.version - read_version
        self.version += 1
        return difference, [(worker, staleness)]

    def check_epoch_end(self):
        """Exchanges are applied on arrival: nothing can be pending."""


class ElasticAveragingOptimizer(_LocalSteps, ServerClient):
    """The worker's half of EASGD: local steps, and every ``period`` steps the elastic exchange."""

    def __init__(self, optimizer, link, period):
        super().__init__(optimizer, period, "easgd: the period tau")
        self._connect(link)

    def step(self):
        if self._local_step(self.link.counters):
            self.exchange()

    def exchange(self):
        """x_i <- x_i - d, with d = alpha (x_i - x~) computed and added to x~ by the servers."""
        layout = self.link.layout
        local = self.buffer.gather_weights()
        # the wire carries float32 (ps.py), whatever the weights' dtype
        shards = [
            local[layout.shard(k)].astype(np.float32, copy=False) for k in range(layout.servers)
        ]
        headers = self.push(shards)
        for shard, difference in self._replies(headers):
            local[shard] -= difference
        self.buffer.scatter_weights()
        self.link.counters.add("updates", 1)
