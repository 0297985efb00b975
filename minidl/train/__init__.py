"""Training runs: the textbook epoch loop, its callbacks, checkpoints and the run's setup.

``fit(TrainConfig(...))`` trains in this process as ``minidl train`` does, writing a run
folder; it belongs to the application (``minidl_app.run``) and is looked up there when first
used. ``minidl.dist.fit`` adds the distributed modes.
"""

import importlib

from .callbacks import Callback, Diverged, NonFiniteLossError
from .config import ConfigError, TrainConfig
from .loop import Training, evaluate, train_epoch, train_epochs
from .run import TrainingRun

__all__ = [
    "Callback",
    "ConfigError",
    "Diverged",
    "NonFiniteLossError",
    "TrainConfig",
    "Training",
    "TrainingRun",
    "evaluate",
    "fit",
    "train_epoch",
    "train_epochs",
]


def __getattr__(name):
    """``fit``, an old name of the application's ``minidl_app.run.fit`` (PEP 562)."""
    if name == "fit":
        return importlib.import_module("minidl_app.run").fit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
