"""Training runs: the textbook epoch loop, checkpoints, run folders and resuming.

``fit(TrainConfig(...))`` trains in this process as ``minidl train`` does;
``minidl.dist.fit`` adds the distributed modes.
"""

from .callbacks import Callback, Diverged, NonFiniteLossError
from .config import ConfigError, TrainConfig
from .loop import Training, evaluate, train_epoch, train_epochs
from .run import TrainingRun, fit

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
