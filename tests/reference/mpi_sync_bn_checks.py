"""The synchronised batch-norm exercise (16.1) under mpiexec:
``mpiexec -n N python mpi_sync_bn_checks.py NAME``.

``check_reference`` runs its visible and hidden checks on the reference; each other
``check_<name>`` puts a typical wrong solution in place of the reference's and asserts the
verdicts of the checks: which pass, and what the failing ones say. A passing rank prints
``CHECK <name> OK rank <r>``.
"""

import functools
import sys

import numpy as np

from minidl.exercises import get, hidden_catalogue
from minidl.functional.normalization import channel_axes, per_channel
from minidl.reference.dist import sync_batchnorm
from tests.distributed.mpi_checks import run_named_checks
from tests.reference import mutations
from tests.reference.mutations import verdict

ID = "16.1"
HIDDEN = {  # the words in each hidden check's test name -> its key here
    "uneven": "uneven shares",
    "far": "mean 1e5",
    "messages": "one allgather",
}


def checks():
    """{"visible": check, "uneven": check, "far": check, "messages": check}."""
    found = {"visible": get(ID).check}
    for hidden in hidden_catalogue():
        if hidden.id == ID:
            (key,) = [k for k, words in HIDDEN.items() if hidden.test.startswith(words)]
            found[key] = hidden.check
    assert sorted(found) == sorted(["visible", *HIDDEN]), sorted(found)
    return found


def expect_verdicts(comm, **expected):
    """For each check named in ``expected``: None where it must pass, else words its failure
    says; the checks not named must pass."""
    for name, check in checks().items():
        words = expected.get(name)
        said = verdict(check, comm)
        if words is None:
            assert said is None, f"{name}: {said}"
        else:
            assert said is not None, f"the {name} check passed a wrong solution"
            for word in words:
                assert word in said, f"{name}: {word!r} not in: {said}"


def check_reference(comm):
    for check in checks().values():
        check(comm)


in_place_of = functools.partial(mutations.in_place_of, sync_batchnorm)


def normalise(x, gamma, beta, mean, var, running_mean, running_var, n, momentum, eps):
    """The rest of a forward once the statistics are known: y and the reference's cache."""
    running_mean[...] = (1 - momentum) * running_mean + momentum * mean
    running_var[...] = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    inv_std = 1 / np.sqrt(var + eps)
    x_hat = (x - per_channel(mean, x.ndim)) * per_channel(inv_std, x.ndim)
    return per_channel(gamma, x.ndim) * x_hat + per_channel(beta, x.ndim), (
        x_hat,
        inv_std,
        gamma,
        n,
    )


def forward_per_rank(comm, x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """Wrong: plain batch norm, the statistics of this rank's share alone."""
    axes, n = channel_axes(x), x.size // x.shape[1]
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    return normalise(x, gamma, beta, mean, var, running_mean, running_var, n, momentum, eps)


def backward_per_rank(comm, dout, cache):
    """Wrong: the serial backward of this rank's share, no allreduce."""
    x_hat, inv_std, gamma, _ = cache
    axes = channel_axes(dout)
    dx_hat = dout * per_channel(gamma, dout.ndim)
    mean_dx_hat = dx_hat.mean(axis=axes, keepdims=True)
    mean_dx_hat_x_hat = (dx_hat * x_hat).mean(axis=axes, keepdims=True)
    dx = per_channel(inv_std, dout.ndim) * (dx_hat - mean_dx_hat - x_hat * mean_dx_hat_x_hat)
    return dx, (dout * x_hat).sum(axis=axes), dout.sum(axis=axes)


def join_averaging(counts, means, m2s):
    """Wrong: the shares' means and variances averaged, each share weighing the same (the
    spread of the means added): right when the shares are even."""
    n = counts.sum()
    mean = means.mean(axis=0)
    var = (m2s / counts[:, None]).mean(axis=0) + ((means - mean) ** 2).mean(axis=0)
    return n, mean, var * n


def join_without_the_means(counts, means, m2s):
    """Wrong: the M2s added, forgetting how far the shares' means lie apart."""
    n = counts.sum()
    return n, (counts[:, None] * means).sum(axis=0) / n, m2s.sum(axis=0)


def forward_sums_of_squares(
    comm, x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5
):
    """Wrong: one allreduce of [n, sum x, sum x^2] and var = E[x^2] - E[x]^2."""
    axes, c = channel_axes(x), x.shape[1]
    sums = np.concatenate([[x.size // c], x.sum(axis=axes), (x * x).sum(axis=axes)])
    comm.allreduce(sums, op="sum")
    n, mean = sums[0], sums[1 : 1 + c] / sums[0]
    var = sums[1 + c :] / n - mean**2
    return normalise(x, gamma, beta, mean, var, running_mean, running_var, n, momentum, eps)


@in_place_of("sync_batch_norm_forward", forward_per_rank)
@in_place_of("sync_batch_norm_backward", backward_per_rank)
def check_per_rank(comm):
    expect_verdicts(
        comm,
        visible=["(N, 3) on 3 ranks, shares (3, 3, 3): step 1: y of this rank's share"],
        uneven=["step 1: y of this rank's share"],
        far=["step 1: y of this rank's share"],
        messages=["step 1: y of this rank's share"],
    )


@in_place_of("sync_batch_norm_backward", backward_per_rank)
def check_backward_without_allreduce(comm):
    expect_verdicts(
        comm,
        visible=["(N, 3) on 3 ranks, shares (3, 3, 3): step 1: dx of this rank's share"],
        uneven=["step 1: dx of this rank's share"],
        far=["step 1: dx of this rank's share"],
        messages=["step 1: dx of this rank's share"],
    )


@in_place_of("join_statistics", join_averaging)
def check_join_averaging(comm):
    expect_verdicts(
        comm,
        uneven=["(N, 4) on 3 ranks, shares (3, 1, 2): step 1: y of this rank's share"],
        far=["(N, 2) on 3 ranks, shares (3, 1, 2): step 1: y of this rank's share"],
        messages=["(N, 4) on 3 ranks, shares (3, 1, 2): step 1: y of this rank's share"],
    )


@in_place_of("join_statistics", join_without_the_means)
def check_join_without_the_means(comm):
    expect_verdicts(
        comm,
        visible=["(N, 3) on 3 ranks, shares (3, 3, 3): step 1: y of this rank's share"],
        uneven=["step 1: y of this rank's share"],
        far=["step 1: y of this rank's share"],
        messages=["step 1: y of this rank's share"],
    )


@in_place_of("sync_batch_norm_forward", forward_sums_of_squares)
def check_sums_of_squares(comm):
    expect_verdicts(
        comm,
        visible=["the forward of step 1: the collectives (one allgather)", "allreduce"],
        far=["(N, 2) on 3 ranks, shares (3, 1, 2): step 1: y of this rank's share"],
        messages=["the forward of step 1: the collectives (one allgather)", "allreduce"],
    )


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
