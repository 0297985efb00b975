"""Synchronised batch normalisation: every batch-norm layer of a model normalised with the
statistics of the whole batch of a process group.

Data parallelism gives each rank a share of the batch; plain ``BatchNorm1d/2d`` normalise
with the mean and variance of that share, so n ranks with batch b compute what one process
with batch b does, n times over, not what one process with batch n*b does. Set to a group,
they join the statistics of all its ranks (``F.batch_norm``: Chan et al.'s parallel
variance in the forward, one allreduce of the two gradient means in the backward), and n
ranks compute exactly the outputs, gradients and running statistics of one process with
the whole batch (Ioffe & Szegedy 2015, whose statistics are the mini-batch's).
"""

from .. import layers as L
from ..train.config import ConfigError, option


def convert_sync_batchnorm(model, group):
    """``model`` with every ``BatchNorm1d``/``BatchNorm2d`` (nested ones too) normalising over
    ``group`` (a ``Communicator``; None: back to per-process statistics), in place: weights,
    buffers and parameter names stay as they are. Returns ``model``."""
    if group is not None and not all(hasattr(group, a) for a in ("allgather", "allreduce")):
        raise TypeError(
            f"convert_sync_batchnorm: group must be a Communicator (md.dist.init() or a "
            f"Grid's group), got {type(group).__name__}"
        )
    for _, module in model.named_modules():
        if isinstance(module, (L.BatchNorm1d, L.BatchNorm2d)):
            module.group = group
    return model


def sync_for_training(model, group, samples, batch_size):
    """``convert_sync_batchnorm(model, group)`` for ``fit``'s ``--sync-bn``, refusing in one line
    what cannot run: one replica, no batch-norm layer, or a short last batch that leaves a
    replica without a sample (it runs no forward, so it could not join the statistics)."""
    if group.size == 1:
        raise ConfigError(
            f"{option('sync_bn')} joins the batch statistics of several replicas; this run has "
            f"one (dp=1): drop {option('sync_bn')}"
        )
    if not any(isinstance(m, (L.BatchNorm1d, L.BatchNorm2d)) for m in model.modules()):
        raise ConfigError(
            f"{option('sync_bn')}: the model has no BatchNorm1d/2d layer to synchronise; drop "
            f"{option('sync_bn')}"
        )
    last = samples % (batch_size * group.size)
    if 0 < last < group.size:
        raise ConfigError(
            f"{option('sync_bn')}: the last batch of {last} samples leaves a replica without "
            f"one, which could not join the statistics; change {option('batch_size')} or the "
            f"sample count ({samples})"
        )
    return convert_sync_batchnorm(model, group)
