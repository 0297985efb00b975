"""How one epoch of training happens in a process alone: the engine of a local run.

An engine gives the run (``run.py``) one face, whatever the mode:
``train(epoch, progress) -> (stats, lr, records)``; ``schedulable`` (what an
LR schedule drives on this rank, or None); ``checkpoint_optimizer`` (whose
state the checkpoint keeps, or None); ``optimizer`` (what steps);
``progress_rank`` (the rank that shows a progress bar); ``callbacks`` (the
loop's hooks, ``callbacks.Callback``); ``distribute()`` (after a resume
loaded the state); ``evaluated()`` (after the epoch's evaluation and
checkpoint); ``record()`` (its options, for the run's configuration);
``close()``. The engines of distributed modes live in ``minidl.dist``.
"""

from ..data import DataLoader
from .callbacks import NonFiniteLossError, SampleKeys, StopOnNonFiniteLoss
from .loop import train_epoch
from .setup import augmentation, make_optimizer


class Diverged(RuntimeError):
    """The loss, the test loss or the weights stopped being finite numbers."""


class LocalEngine:
    """One process, the whole model, one update per step."""

    progress_rank = 0
    comm = None

    def __init__(self, config, model, train_set, comm=None, callbacks=()):
        self.config, self.model, self.comm = config, model, comm
        # alone, a process stops on its own loss; ranks decide together on the averaged gradient
        self.callbacks = ([] if comm is not None else [StopOnNonFiniteLoss()]) + list(callbacks)
        self.schedulable = self.checkpoint_optimizer = self.optimizer = make_optimizer(
            config, model.parameters()
        )
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        self.loader = DataLoader(
            train_set,
            config.batch_size,
            shuffle=True,
            seed=config.seed,
            drop_last=False,
            rank=rank,
            world_size=size,
            transform=augmentation(config),
            workers=config.data_workers,
            skip_unreadable=config.skip_unreadable,
        )
        self.callbacks.append(SampleKeys(self.loader))

    def distribute(self):
        """Nothing to distribute in a process alone."""

    def epoch_records(self, epoch):
        """Extra metrics records of the epoch (none here)."""
        return []

    def train(self, epoch, progress):
        self.loader.set_epoch(epoch - 1)
        lr = self.schedulable.lr
        try:
            stats = train_epoch(
                self.model, self.optimizer, self.loader, epoch, self.config.device,
                progress=progress, comm=self.comm, callbacks=self.callbacks,
            )  # fmt: skip
        except NonFiniteLossError as exc:
            raise Diverged(str(exc)) from None
        return stats, lr, self.epoch_records(epoch)

    def record(self):
        return {}

    def evaluated(self):
        pass

    def close(self):
        pass
