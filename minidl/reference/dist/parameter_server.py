"""A single-server parameter server over blocking send and receive: push gradients, pull weights.

Rank 0 is the server and holds the weights w; ranks 1..n are workers
(Li et al. 2014, "Scaling Distributed Machine Learning with the Parameter
Server"; Dean et al. 2012, "Large Scale Distributed Deep Networks", Downpour
SGD). A worker repeats

    g = gradient(w_read)          on its own data
    push(g)                       send [rank, PUSH, g] to the server
    w_read = pull()               receive the server's current weights

and the server applies every gradient on arrival with an update rule, e.g.
SGD w <- w - (lr / n) g_i (one n-th of a step on the global batch). It
answers a worker's pull as soon as the SSP gate lets that worker start its
next iteration (``minidl.reference.dist.ssp``): at once under asp, once the
slowest worker is within S clocks under ssp:S, once every worker finished the
clock under bsp (S = 0). Under bsp with SGD this is synchronous SGD on the
union of the workers' batches.

The staleness of an update is how many updates the server applied between
the worker's read and this update. With n workers, SSP bounds it by
(n - 1)(2S + 1): while a worker's clock-c gradient is on its way, each other
worker may push clocks c - S .. c + S that its read did not hold.

Every message to the server is one array [rank, kind, payload...] of the
weights' dtype; a worker ends with one DONE message after its last pull, and
the server returns once all n said DONE, so no message is left unreceived.
Every worker must take the same number of steps (else bsp and ssp would wait
for a clock that never comes).
"""

from minidl.backend import get_array_module
from minidl.dist.job import mpi_module

SERVER = 0
HEADER = 2  # [worker rank, kind]
PUSH, DONE = 0, 1  # kinds of worker -> server messages


def sgd_update(lr):
    """The server's update rule w <- w - lr * g, applied in place (Downpour SGD's server)."""

    def update(weights, gradient):
        weights -= lr * gradient

    return update


def serve(comm, weights, update, clocks):
    """Rank 0: serve the flat ``weights`` until every worker said DONE; returns (weights, log).

    ``update(weights, gradient)`` changes the weights in place; ``clocks`` is
    the SSP clock table of the ``comm.size - 1`` workers (``WorkerClocks`` or
    the tuned ``ClockTable``). ``log`` lists every applied update as
    (worker index, its clock, staleness), in the order they were applied.
    """
    workers = comm.size - 1
    xp = get_array_module(weights)
    message = xp.empty(HEADER + weights.size, dtype=weights.dtype)
    for rank in range(1, comm.size):
        comm.send(weights, rank)  # every worker's first pull
    version = 0  # updates applied so far
    read_version = [0] * workers  # the version each worker last pulled
    waiting = set()  # workers whose pull is not answered yet
    log = []
    done = 0
    while done < workers:
        comm.recv(message, mpi_module().ANY_SOURCE)
        worker, kind = int(message[0]) - 1, int(message[1])
        if kind == DONE:
            done += 1
            continue
        # BEGIN EXERCISE 8.2
        update(weights, message[HEADER:])
        log.append((worker, clocks.clocks[worker], version - read_version[worker]))
        version += 1
        clocks.tick(worker)
        waiting.add(worker)
        for w in sorted(waiting):
            if clocks.may_start(clocks.clocks[w]):
                comm.send(weights, w + 1)
                read_version[w] = version
                waiting.remove(w)
        # END EXERCISE 8.2
    return weights, log


def work(comm, weights, gradient, steps):
    """Ranks 1..n: ``steps`` times pull, ``gradient(weights, step)``, push; returns the weights.

    ``weights`` is this worker's buffer for the pulled weights (its shape and
    dtype are the server's).
    """
    xp = get_array_module(weights)
    message = xp.empty(HEADER + weights.size, dtype=weights.dtype)
    comm.recv(weights, SERVER)
    for step in range(steps):
        g = gradient(weights, step)
        # BEGIN EXERCISE 8.2
        message[0], message[1] = comm.rank, PUSH
        message[HEADER:] = g.reshape(-1)
        comm.send(message, SERVER)
        comm.recv(weights, SERVER)
        # END EXERCISE 8.2
    comm.send(xp.asarray([comm.rank, DONE], dtype=weights.dtype), SERVER)
    return weights
