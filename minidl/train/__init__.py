"""Training runs: the textbook epoch loop, checkpoints, run folders and resuming.

``fit(TrainConfig(...))`` trains in this process as ``minidl train`` does;
``minidl.dist.fit`` adds the distributed modes.
"""

from .callbacks import Callback, NonFiniteLossError
from .config import ConfigError, TrainConfig
from .engine import Diverged
from .loop import evaluate, train_epoch
from .run import TrainingRun, fit

__all__ = [
    "Callback", "ConfigError", "Diverged", "NonFiniteLossError", "TrainConfig", "TrainingRun",
    "evaluate", "fit", "train_epoch",
]  # fmt: skip
