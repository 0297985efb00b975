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

A dataset of files (one with ``load(index, rng)`` and ``labels``, such as
``folder.ImageFolder``) is read as it goes: ``workers`` threads decode the
samples of the next ``prefetch`` batches while the current one trains
(Pillow and NumPy release the GIL while they decode, resize and copy; threads
also stay safe in an MPI rank, where forking is not). Sample ``i`` of epoch
``e`` draws its random choices from a generator seeded by ``(seed, e, i)``,
so its batch is the same whatever the worker count, the rank count or the
timing; an in-memory dataset's ``transform`` draws each sample's crop and flip
the same way (``random.SampleDraws``). ``current_sample_keys`` holds ``(seed, e,
i)`` of each sample of the batch just yielded (the training loop keys dropout by
them). An unreadable
file stops the epoch with an ``ImageDecodeError`` naming it, or, with
``skip_unreadable``, is left out of its batch and counted in ``loader.skipped``.
"""

import collections
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..random import SampleDraws, batch_keys
from .imageprep import ImageDecodeError


class DataLoader:
    """Iterate ``(x, y)`` NumPy batches: x float32 C-contiguous, y int64.

    The epoch: an internal counter, used and then incremented by each
    ``iter(loader)``; ``set_epoch(e)`` sets the epoch the next iteration uses
    (so calling it before every epoch, or never, gives the same sequence).
    ``transform(x, y, rng) -> (x, y)`` is applied to each whole batch (see
    ``augment.py``); its ``rng`` is a ``numpy.random.Generator`` seeded by
    ``(seed, epoch, rank)``, so augmentation is reproducible per rank.
    Each batch is a new array: keeping one across steps is safe. ``workers``,
    ``prefetch`` and ``skip_unreadable`` apply to datasets of files (module doc).
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
        workers: int = 0,
        prefetch: int = 2,
        skip_unreadable: bool = False,
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
        self.workers, self.prefetch = max(0, int(workers)), max(0, int(prefetch))
        self.skip_unreadable, self.skipped = bool(skip_unreadable), []
        self.epoch = 0
        self.current_global_batch_size = 0
        self.current_sample_keys = None  # (seed, epoch, dataset index) of the batch's samples
        if hasattr(dataset, "load"):
            self._images, self._labels = None, np.asarray(dataset.labels, dtype=np.int64)
        else:
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
        if self._images is None:
            yield from self._stream(epoch)
            return
        for step, index in enumerate(self.rank_indices(epoch)):
            self.current_global_batch_size = self.global_batch_size(step)
            self.current_sample_keys = batch_keys(self.seed, epoch, index)
            x, y = self._gather(index)
            if self.transform is not None:  # each sample's crop and flip drawn by its key
                x, y = self.transform(x, y, SampleDraws(self.current_sample_keys))
            yield x, y

    def _gather(self, index):
        return np.take(self._images, index, axis=0), np.take(self._labels, index, axis=0)

    def _load(self, epoch, index):
        """Sample ``index`` of ``epoch``, or the ``ImageDecodeError`` when skipping them."""
        try:
            return self.dataset.load(index, np.random.default_rng([self.seed, epoch, index]))
        except ImageDecodeError as exc:
            if not self.skip_unreadable:
                raise
            return exc

    def _stream(self, epoch):
        """The batches of a dataset of files, ``prefetch`` batches decoding ahead."""
        steps = self.rank_indices(epoch)
        pool = ThreadPoolExecutor(self.workers) if self.workers else None
        submit = pool.submit if pool else _run_now
        pending, ahead = collections.deque(), self.prefetch if pool else 0
        try:
            for step in range(len(steps)):
                while len(pending) <= ahead and step + len(pending) < len(steps):
                    indices = steps[step + len(pending)]
                    pending.append([submit(self._load, epoch, int(i)) for i in indices])
                samples = [future.result() for future in pending.popleft()]
                keep = [j for j, sample in enumerate(samples) if not isinstance(sample, Exception)]
                self.skipped += [sample for sample in samples if isinstance(sample, Exception)]
                self.current_global_batch_size = self.global_batch_size(step)
                self.current_sample_keys = batch_keys(self.seed, epoch, steps[step][keep])
                shape = (len(keep), *self.dataset.sample_shape)
                x = np.stack([samples[j] for j in keep]) if keep else np.zeros(shape, np.float32)
                yield x, self._labels[steps[step][keep]]
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


class _run_now:
    """A finished future: ``submit`` for loading in the calling thread (no workers)."""

    def __init__(self, fn, *args):
        self._value = fn(*args)

    def result(self):
        return self._value


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
