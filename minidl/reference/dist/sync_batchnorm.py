"""Synchronised batch normalisation in textbook form: the forward and backward of a batch-norm
layer whose batch is shared among the ranks of a group (Ioffe & Szegedy 2015, Batch
Normalization, Alg. 1; the variance joined as Chan, Golub & LeVeque 1979, Updating Formulae
and a Pairwise Algorithm for Computing Sample Variances).

Each of the P ranks holds a share of n_r samples of the batch of n = sum_r n_r. Per channel,
rank r computes the statistics of its share,

    mean_r = (1/n_r) sum x,   M2_r = sum (x - mean_r)^2,

and one allgather of [n_r, mean_r, M2_r] gives every rank all P of them, which it joins with
Chan et al.'s parallel variance:

    mean = (1/n) sum_r n_r mean_r
    M2   = sum_r M2_r + sum_r n_r (mean_r - mean)^2,     var = M2 / n      (biased)

Every rank then normalises its share with the statistics of the whole batch, as one process
with all n samples does (Ioffe & Szegedy's mini-batch statistics):

    x_hat = (x - mean) / sqrt(var + eps),   y = gamma x_hat + beta

and updates the running estimates with the group's count n, so that every rank holds the
same: running_var <- (1 - momentum) running_var + momentum var n / (n - 1). Averaging the
shares' variances forgets the second sum (how far the shares' means lie apart); averaging
their means weighs a short share as much as a long one; sum x^2 - n mean^2 loses the digits
of a variance that is small beside mean^2. Evaluation uses the running estimates: no message.

Backward: the serial rule (``minidl.reference.functional.batch_norm``), with dx_hat = dy gamma,

    dx = (1 / sqrt(var + eps)) (dx_hat - mean(dx_hat) - x_hat mean(dx_hat x_hat)),

holds two means over the whole batch: one allreduce of [sum dx_hat, sum dx_hat x_hat] per
channel gives them. dgamma = sum dy x_hat and dbeta = sum dy stay sums over this rank's
share: data parallelism's allreduce of the gradients adds them up, as for any weight.

An exercise region here must not call the tuned batch norm (``F.batch_norm`` with a group)
or autograd: the check fails one that does, since the exercise is to write the algorithm
out.
"""

from ...backend import get_array_module
from ...functional.normalization import channel_axes, per_channel


def join_statistics(counts, means, m2s):
    """(n, mean, M2) of the whole batch from the shares' ``counts`` (P,), ``means`` (P, C) and
    ``m2s`` (P, C): Chan et al.'s parallel variance (module doc)."""
    # BEGIN EXERCISE 16.1
    weights = counts[:, None]
    n = counts.sum()
    mean = (weights * means).sum(axis=0) / n
    m2 = m2s.sum(axis=0) + (weights * (means - mean) ** 2).sum(axis=0)
    return n, mean, m2
    # END EXERCISE 16.1


def sync_batch_norm_forward(
    comm, x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5
):
    """Training forward of this rank's share ``x`` ((N_r, C) or (N_r, C, H, W), N_r >= 1)
    with the statistics of every rank's share: ``(y, cache)``. ``gamma``, ``beta`` and the
    running estimates have shape (C,); the running estimates are updated in place, the same
    on every rank."""
    xp = get_array_module(x)
    axes, c = channel_axes(x), x.shape[1]
    # BEGIN EXERCISE 16.1
    n_r = x.size // c
    mean_r = x.mean(axis=axes)
    m2_r = ((x - per_channel(mean_r, x.ndim)) ** 2).sum(axis=axes)
    mine = xp.concatenate([xp.full(1, n_r, dtype=x.dtype), mean_r, m2_r])
    every = comm.allgather(mine)  # (P, 1 + 2C): row r is rank r's [n_r, mean_r, M2_r]
    n, mean, m2 = join_statistics(every[:, 0], every[:, 1 : 1 + c], every[:, 1 + c :])
    var = m2 / n
    running_mean[...] = (1 - momentum) * running_mean + momentum * mean
    running_var[...] = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    inv_std = 1 / xp.sqrt(var + eps)
    x_hat = (x - per_channel(mean, x.ndim)) * per_channel(inv_std, x.ndim)
    y = per_channel(gamma, x.ndim) * x_hat + per_channel(beta, x.ndim)
    return y, (x_hat, inv_std, gamma, n)
    # END EXERCISE 16.1


def sync_batch_norm_backward(comm, dout, cache):
    """(dx, dgamma, dbeta) of this rank's share from ``dout`` = dL/dy of its share; dgamma and
    dbeta are the sums over this share (module doc)."""
    xp = get_array_module(dout)
    x_hat, inv_std, gamma, n = cache
    axes, c = channel_axes(dout), dout.shape[1]
    dgamma = (dout * x_hat).sum(axis=axes)
    dbeta = dout.sum(axis=axes)
    # BEGIN EXERCISE 16.1
    dx_hat = dout * per_channel(gamma, dout.ndim)
    sums = xp.concatenate([dx_hat.sum(axis=axes), (dx_hat * x_hat).sum(axis=axes)])
    comm.allreduce(sums, op="sum")
    mean_dx_hat = per_channel(sums[:c] / n, dout.ndim)
    mean_dx_hat_x_hat = per_channel(sums[c:] / n, dout.ndim)
    dx = per_channel(inv_std, dout.ndim) * (dx_hat - mean_dx_hat - x_hat * mean_dx_hat_x_hat)
    return dx, dgamma, dbeta
    # END EXERCISE 16.1
