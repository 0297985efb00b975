"""Mini-batches for one process or for one rank of a data-parallel job.

Contract (what distributed training relies on): each epoch draws one
permutation of the whole dataset, seeded by ``(seed, epoch)`` and so identical
on every rank; it is cut into *global* batches of ``batch_size * world_size``
consecutive indices, and rank ``r`` takes ``np.array_split(global_batch,
world_size)[r]``. Hence ``world_size`` ranks with batch ``b`` see, step by
step, exactly the samples one process with batch ``world_size * b`` sees, in
the same order; every sample is seen once per epoch; every rank takes
``len(loader) = ceil(N / (b * W))`` steps (``floor`` with ``drop_last``). When
the last global batch holds fewer samples than there are ranks, some ranks get
an empty batch (shape ``(0, 1, 28, 28)``) for that step: they still take the
step, so collectives stay matched.
"""

import math

import numpy as np


class DataLoader:
    """Iterate ``(x, y)`` NumPy batches: x float32 C-contiguous, y int64.

    The epoch: an internal counter, used and then incremented by each
    ``iter(loader)``; ``set_epoch(e)`` sets the epoch the next iteration uses
    (so calling it before every epoch, or never, gives the same sequence).
    ``transform(x, y, rng) -> (x, y)`` is applied to each whole batch (see
    ``augment.py``); its ``rng`` is a ``numpy.random.Generator`` seeded by
    ``(seed, epoch, rank)``, so augmentation is reproducible per rank.
    Each batch is a new array: keeping one across steps is safe.
    """

    def __init__(
        self,
        dataset,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        transform=None,
    ):
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(
                f"DataLoader: batch_size must be a positive integer, got {batch_size!r}"
            )
        if not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(
                f"DataLoader: world_size must be a positive integer, got {world_size!r}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"DataLoader: rank {rank} is outside 0..{world_size - 1} (world_size={world_size})"
            )
        self.dataset = dataset
        self.batch_size, self.shuffle, self.seed = int(batch_size), bool(shuffle), int(seed)
        self.drop_last, self.rank, self.world_size = bool(drop_last), int(rank), int(world_size)
        self.transform = transform
        self.epoch = 0
        self.current_global_batch_size = 0
        self._images, self._labels = _arrays_of(dataset)

    @property
    def global_batch(self):
        """Samples per step over all ranks: ``batch_size * world_size``."""
        return self.batch_size * self.world_size

    def __len__(self):
        n = len(self._labels)
        return n // self.global_batch if self.drop_last else math.ceil(n / self.global_batch)

    def set_epoch(self, epoch):
        """Make the next iteration epoch ``epoch`` (reshuffles as that epoch)."""
        self.epoch = int(epoch)

    def epoch_order(self, epoch):
        """The dataset order of ``epoch``: a permutation seeded by (seed, epoch), or 0..N-1."""
        n = len(self._labels)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def global_batch_size(self, step):
        """How many samples global batch ``step`` holds over all ranks (the last may be short)."""
        return max(0, min(self.global_batch, len(self._labels) - step * self.global_batch))

    def rank_indices(self, epoch):
        """The dataset indices of each step of ``epoch`` for this rank (a list of arrays)."""
        order = self.epoch_order(epoch)
        g = self.global_batch
        return [
            np.array_split(order[step * g : (step + 1) * g], self.world_size)[self.rank]
            for step in range(len(self))
        ]

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        return self._batches(epoch)

    def _batches(self, epoch):
        rng = np.random.default_rng([self.seed, epoch, self.rank]) if self.transform else None
        for step, index in enumerate(self.rank_indices(epoch)):
            self.current_global_batch_size = self.global_batch_size(step)
            x, y = self._gather(index)
            if self.transform is not None:
                x, y = self.transform(x, y, rng)
            yield x, y

    def _gather(self, index):
        return np.take(self._images, index, axis=0), np.take(self._labels, index, axis=0)


def _arrays_of(dataset):
    """The dataset's images (float32, C-contiguous) and labels (int64)."""
    images, labels = getattr(dataset, "images", None), getattr(dataset, "labels", None)
    if images is None or labels is None:
        raise TypeError(
            f"DataLoader: {type(dataset).__name__} has no .images/.labels arrays; "
            "wrap your arrays in minidl.data.ArrayDataset(images, labels)"
        )
    if len(images) != len(labels):
        raise ValueError(f"DataLoader: {len(images)} images but {len(labels)} labels")
    return (
        np.ascontiguousarray(images, dtype=np.float32),
        np.ascontiguousarray(labels, dtype=np.int64),
    )
