"""Hooks of the epoch loop: what a run adds to the textbook step without changing it.

A callback overrides any of ``Callback``'s methods; the loop calls them in the order of
its ``callbacks`` list. Watchdogs, stragglers, data parallelism's batch weighting, the
non-finite loss check and a layout's work between epochs are callbacks.
"""

import math

from ..random import set_sample_keys
from .config import OptionMessage

STOPPED = (
    "training stopped before this update (the last checkpoint is kept). "
    "Lower the learning rate, or clip gradients"
)


class NonFiniteLossError(ArithmeticError):
    """The loss (or the gradient of an update) became NaN or infinite; training stops."""


class Diverged(OptionMessage, RuntimeError):
    """The loss, the test loss or the weights stopped being finite numbers."""


class Callback:
    """Does nothing; subclasses override the hooks they need."""

    def before_epoch(self, epoch):
        """Before epoch ``epoch`` (from 1) trains."""

    def after_epoch(self, epoch, stats):
        """After it trained (``stats``: ``train_epoch``'s); returns the records it adds to the
        epoch's metrics (collective hooks run on every rank)."""
        return []

    def after_evaluation(self):
        """After the epoch's evaluation and checkpoint."""

    def close(self):
        """When the run ends, however it ends."""

    def before_step(self, step, batch_size):
        """Before ``zero_grad`` of step ``step``, whose batch holds ``batch_size`` samples."""

    def after_forward(self, epoch, step, loss):
        """After the forward pass; ``loss`` is a Python float (0.0 for an empty share)."""

    def after_backward(self, compute_seconds):
        """After backward, before the update; returns the seconds it slept (stragglers)."""
        return 0.0

    def after_step(self, where):
        """After the update, or after an evaluated batch; ``where`` says which."""


class SampleKeys(Callback):
    """Key the step's dropout masks by sample (``random.set_sample_keys``) when the loader has
    keys (datasets of files): data-parallel ranks then draw a whole-batch process's masks."""

    def __init__(self, loader):
        self.loader = loader

    def before_step(self, step, batch_size):
        set_sample_keys(getattr(self.loader, "current_sample_keys", None))

    def after_step(self, where):
        set_sample_keys(None)


class StopOnNonFiniteLoss(Callback):
    """Raise ``NonFiniteLossError`` before the update when the loss is NaN or infinite. Only
    for a process that decides alone: data-parallel ranks decide on the averaged gradient."""

    def after_forward(self, epoch, step, loss):
        if not math.isfinite(loss):
            raise NonFiniteLossError(f"epoch {epoch}, step {step}: the loss is {loss}; " + STOPPED)
