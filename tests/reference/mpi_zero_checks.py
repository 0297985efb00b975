"""The ZeRO exercises (15.1, 15.2) under mpiexec: ``mpiexec -n N python mpi_zero_checks.py NAME``.

``check_reference`` runs their visible and hidden checks on the reference; each other
``check_<name>`` puts a wrong solution in place of the reference's and asserts the verdicts
of both checks: which passes, and what the failing one says. A passing rank prints
``CHECK <name> OK rank <r>``.
"""

import functools
import sys

import numpy as np

from minidl.exercises import get, hidden_catalogue
from minidl.intmath import block_bounds, block_sizes, ceil_div
from minidl.reference.dist import zero
from tests.distributed.mpi_checks import run_named_checks
from tests.reference import mutations
from tests.reference.mutations import verdict

IDS = ("15.1", "15.2")


def checks(exercise_id):
    """The visible and the hidden check of ``exercise_id``."""
    (hidden,) = [h for h in hidden_catalogue() if h.id == exercise_id]
    return get(exercise_id).check, hidden.check


def expect_verdicts(comm, exercise_id, visible, hidden):
    """``visible``, ``hidden``: None where that check must pass, else words its failure says."""
    for check, words in zip(checks(exercise_id), (visible, hidden)):
        said = verdict(check, comm)
        if words is None:
            assert said is None, said
        else:
            assert said is not None, f"{check.__name__} passed a wrong solution"
            for word in words:
                assert word in said, f"{word!r} not in: {said}"


def check_reference(comm):
    for exercise_id in IDS:
        for check in checks(exercise_id):
            check(comm)


in_place_of = functools.partial(mutations.in_place_of, zero)


def shard(comm, n):
    return block_sizes(n, comm.size), block_bounds(n, comm.size)[comm.rank]


def zero1_allreducing(comm, weights, grad, state, update):
    """Wrong: allreduces the whole gradient, then updates this rank's shard from it."""
    counts, (start, stop) = shard(comm, weights.size)
    mean = comm.allreduce(grad.copy(), op="mean")
    update(weights[start:stop], mean[start:stop], state)
    return comm.allgatherv(weights, counts)


def zero1_whole_state(comm, weights, grad, state, update):
    """Wrong: the rule runs on the whole vector (a zero gradient beyond the shard), so the
    state it keeps is the whole vector's."""
    counts, (start, stop) = shard(comm, weights.size)
    mine = np.empty(counts[comm.rank])
    comm.reduce_scatter(grad, counts, mine, op="mean")
    padded = np.zeros_like(grad)
    padded[start:stop] = mine
    update(weights, padded, state)
    return comm.allgatherv(weights, counts)


def zero1_ceil_shards(comm, weights, grad, state, update):
    """Wrong cut, used consistently: ceil(n/P) elements a shard and the rest on the last."""
    n, block = weights.size, ceil_div(weights.size, comm.size)
    counts = [max(0, min(block, n - r * block)) for r in range(comm.size)]
    start = min(comm.rank * block, n)
    mine = np.empty(counts[comm.rank])
    comm.reduce_scatter(grad, counts, mine, op="mean")
    update(weights[start : start + mine.size], mine, state)
    return comm.allgatherv(weights, counts)


def zero1_floor_offsets(comm, weights, grad, state, update):
    """Wrong: block_sizes' shards, each starting at rank * (n // P)."""
    counts = block_sizes(weights.size, comm.size)
    start = comm.rank * (weights.size // comm.size)
    mine = np.empty(counts[comm.rank])
    comm.reduce_scatter(grad, counts, mine, op="mean")
    update(weights[start : start + mine.size], mine, state)
    return comm.allgatherv(weights, counts)


@in_place_of("zero1_step", zero1_allreducing)
def check_zero1_allreducing(comm):
    expect_verdicts(
        comm, "15.1", ["step 1: no allreduce"], ["step 1: no allreduce", "it allreduced 16 bytes"]
    )


@in_place_of("zero1_step", zero1_whole_state)
def check_zero1_whole_state(comm):
    expect_verdicts(
        comm,
        "15.1",
        ["the optimizer state", "wrong shape"],
        ["the optimizer state 'exp_avg'", "wrong shape", "elements 0:1"],
    )


@in_place_of("zero1_step", zero1_ceil_shards)
def check_zero1_ceil_shards(comm):
    expect_verdicts(
        comm,
        "15.1",
        ["rank 1 of 3: 7 values on 3 ranks, step 1", "its shard of the gradient"],
        ["rank 1 of 3: 13 values on 3 ranks, step 1", "its shard of the gradient: elements 5:9"],
    )


@in_place_of("zero1_step", zero1_floor_offsets)
def check_zero1_floor_offsets(comm):
    expect_verdicts(
        comm,
        "15.1",
        ["7 values on 3 ranks: weights after step 1"],
        ["2 values on 3 ranks: weights after step 1"],
    )


def local_gradient(x, dy):
    return np.concatenate([(dy.T @ x).reshape(-1), dy.sum(axis=0)])


def forward_keeping(self, x):
    """Wrong: keeps the gathered parameters for backward."""
    self.theta = self.gather()
    weight, bias = self.unflatten(self.theta)
    return x @ weight.T + bias


def backward_from_kept(self, x, dy):
    weight, _ = self.unflatten(self.theta)
    del self.theta
    self.grad = np.empty_like(self.shard)
    self.comm.reduce_scatter(local_gradient(x, dy), self.counts, self.grad, op="mean")
    return dy @ weight


def backward_allreducing(self, x, dy):
    """Wrong: allreduces the whole gradient and keeps this rank's part of it."""
    weight, _ = self.unflatten(self.gather())
    mean = self.comm.allreduce(local_gradient(x, dy), op="mean")
    start = sum(self.counts[: self.comm.rank])
    self.grad = mean[start : start + self.shard.size].copy()
    return dy @ weight


def forward_gathering_once(self, x):
    """Wrong: gathers in the first forward only, and computes from that copy ever after."""
    if not hasattr(self, "theta"):
        self.theta = self.gather()
    weight, bias = self.unflatten(self.theta)
    return x @ weight.T + bias


def backward_from_the_copy(self, x, dy):
    weight, _ = self.unflatten(self.theta)
    self.grad = np.empty_like(self.shard)
    self.comm.reduce_scatter(local_gradient(x, dy), self.counts, self.grad, op="mean")
    return dy @ weight


@in_place_of("ShardedLinear.forward", forward_keeping)
@in_place_of("ShardedLinear.backward", backward_from_kept)
def check_zero3_keeping(comm):
    expect_verdicts(
        comm,
        "15.2",
        ["after the forward of round 1 the layer holds its shard"],
        ["after the forward of round 1 the layer holds its shard", "nothing gathered"],
    )


@in_place_of("ShardedLinear.backward", backward_allreducing)
def check_zero3_allreducing(comm):
    expect_verdicts(
        comm,
        "15.2",
        ["the backward of round 1: no allreduce"],
        ["the backward of round 1: no allreduce"],
    )


@in_place_of("ShardedLinear.forward", forward_gathering_once)
@in_place_of("ShardedLinear.backward", backward_from_the_copy)
def check_zero3_gathering_once(comm):
    expect_verdicts(
        comm,
        "15.2",
        ["Linear(6, 5): 35 values on 3 ranks: y, round 2"],
        ["Linear(10, 5): 55 values on 3 ranks: y, round 2"],
    )


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
