"""Batch normalisation (Ioffe & Szegedy 2015, Batch Normalization: Accelerating Deep Network
Training by Reducing Internal Covariate Shift, Alg. 1 and §3).

Per channel c of an (N, C) or (N, C, H, W) input, over the m values of that
channel in the batch (m = N, or N H W):

    mu = (1/m) sum x,   var = (1/m) sum (x - mu)^2          (biased)
    x_hat = (x - mu) / sqrt(var + eps),   y = gamma x_hat + beta

Training normalises with the batch's mu and var and updates the running
estimates as PyTorch does (and ``minidl.functional.batch_norm``):

    running_mean <- (1 - momentum) running_mean + momentum mu
    running_var  <- (1 - momentum) running_var  + momentum var m / (m - 1)   (unbiased)

Evaluation uses running_mean and running_var instead, so each output
depends on its own input only.

Backward in training, the chain rule through mu and var (Ioffe & Szegedy's
derivation), with dx_hat = dy gamma:

    dvar   = sum dx_hat (x - mu) (-1/2) (var + eps)^(-3/2)
    dmu    = -sum dx_hat / sqrt(var + eps) + dvar (1/m) sum -2 (x - mu)
    dx     = dx_hat / sqrt(var + eps) + dvar 2 (x - mu) / m + dmu / m
    dgamma = sum dy x_hat,   dbeta = sum dy

(the second term of dmu is zero, since sum (x - mu) = 0). It simplifies to
dx = (1 / sqrt(var + eps)) (dx_hat - mean(dx_hat) - x_hat mean(dx_hat x_hat)),
the form the tuned version computes. In evaluation mu and var are
constants: dx = dx_hat / sqrt(var + eps).

An exercise region here must not call minidl's autograd (``Tensor.backward`` of the tuned
ops): the check fails one that does, since the exercise is to write the algorithm out.
"""

from ...backend import get_array_module
from ...functional.normalization import channel_axes, per_channel


def batch_norm_forward(
    x, gamma, beta, running_mean=None, running_var=None, training=True, momentum=0.1, eps=1e-5
):
    """y = gamma x_hat + beta per channel; updates the running statistics in place when training.

    ``gamma``, ``beta``, ``running_mean`` and ``running_var`` have shape (C,);
    the running statistics may be None in training (nothing to update).
    """
    axes = channel_axes(x)
    m = x.size // x.shape[1]  # values per channel
    if training and m < 2:
        raise ValueError(
            f"batch_norm: training needs more than one value per channel, "
            f"got input of shape {x.shape}; use a larger batch or evaluation mode"
        )
    if not training and (running_mean is None or running_var is None):
        raise ValueError(
            "batch_norm: evaluation mode normalises with running_mean and "
            "running_var; pass them, or use training=True"
        )
    if training:
        mu = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)  # biased: divides by m
        if running_mean is not None:
            running_mean[...] = (1 - momentum) * running_mean + momentum * mu.reshape(-1)
            running_var[...] = (1 - momentum) * running_var + momentum * var.reshape(-1) * m / (
                m - 1
            )
    else:
        mu, var = per_channel(running_mean, x.ndim), per_channel(running_var, x.ndim)
    x_mu = x - mu
    inv_std = 1 / get_array_module(x).sqrt(var + eps)
    x_hat = x_mu * inv_std
    y = per_channel(gamma, x.ndim) * x_hat + per_channel(beta, x.ndim)
    return y, (x_mu, inv_std, x_hat, gamma, training)


def batch_norm_backward(dout, cache):
    """(dx, dgamma, dbeta) from dout = dL/dy."""
    x_mu, inv_std, x_hat, gamma, training = cache
    axes = channel_axes(dout)
    dgamma = (dout * x_hat).sum(axis=axes)
    dbeta = dout.sum(axis=axes)
    dx_hat = dout * per_channel(gamma, dout.ndim)
    if not training:
        return dx_hat * inv_std, dgamma, dbeta
    # BEGIN EXERCISE 2.4
    m = dout.size // dout.shape[1]
    dvar = (dx_hat * x_mu).sum(axis=axes, keepdims=True) * -0.5 * inv_std**3
    dmu = -(dx_hat * inv_std).sum(axis=axes, keepdims=True) + dvar * (-2 * x_mu).mean(
        axis=axes, keepdims=True
    )
    dx = dx_hat * inv_std + dvar * 2 * x_mu / m + dmu / m
    return dx, dgamma, dbeta
    # END EXERCISE 2.4
