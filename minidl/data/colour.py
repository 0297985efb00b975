"""The training set's colour statistics: per-channel mean and the RGB covariance's eigenvectors.

AlexNet subtracts the mean and draws its colour noise along the principal
components of the RGB pixel values "throughout the ImageNet training set"
(Krizhevsky et al. 2012, Sec. 4.1). Over ``n`` pixels ``x`` (RGB, 0..255):
``mean = sum(x) / n``, ``cov = sum(x x^T) / n - mean mean^T``, and
``cov = P diag(lambda) P^T`` (eigenvalues in decreasing order). The sums run
in float64 over the prepared 256x256 patches of (at most ``max_images``,
evenly spaced) training images, once: the result is cached in a small
``.npz`` named by a SHA-256 of the file list (paths, sizes, modification
times) and the patch size, so a changed folder is measured again. Under MPI
(``comm``), rank 0 alone measures or reads the cache and broadcasts the
result: the other ranks neither decode the images nor touch the cache.
"""

import hashlib
import io
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import atomic_write
from .imageprep import RESIZE, ImageDecodeError, load_patch
from .locate import cache_root


@dataclass(frozen=True)
class ColourStats:
    """Per-channel mean (3,), eigenvalues (3,) decreasing, eigenvectors (3, 3) as columns,
    and how many images they were measured on."""

    mean: np.ndarray
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    images: int


def pixel_moments(patch):
    """(sum of pixels (3,), sum of outer products (3, 3), pixel count) of an HWC patch."""
    x = patch.reshape(-1, 3).astype(np.float64)
    return x.sum(axis=0), x.T @ x, len(x)


def stats_from_moments(total, outer, count, images):
    """``ColourStats`` from summed moments (the module doc's formulas)."""
    mean = total / count
    cov = outer / count - np.outer(mean, mean)
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1]
    return ColourStats(mean, values[order], vectors[:, order], images)


def measure(paths, resize=RESIZE, workers=0, skip_unreadable=False):
    """``ColourStats`` of the images at ``paths`` (decoded in ``workers`` threads)."""
    total, outer, count, images = np.zeros(3), np.zeros((3, 3)), 0, 0

    def moments(path):
        try:
            return pixel_moments(load_patch(path, resize))
        except ImageDecodeError:
            if not skip_unreadable:
                raise
            return None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        for result in pool.map(moments, paths):
            if result is not None:
                total, outer, count = total + result[0], outer + result[1], count + result[2]
                images += 1
    if not images:
        raise ValueError("colour statistics: no readable training image")
    return stats_from_moments(total, outer, count, images)


def cache_key(paths, resize):
    """SHA-256 of the patch size and each file's path, size and modification time."""
    digest = hashlib.sha256(f"resize={resize}\n".encode())
    for path in paths:
        stat = os.stat(path)
        digest.update(f"{os.path.abspath(path)}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def on_rank_zero(comm, work):
    """``work()`` run by rank 0 of ``comm`` alone and its result given to every rank; an
    exception there is raised on every rank, so that none waits for a result never sent."""
    outcome = None
    if comm.rank == 0:
        try:
            outcome = (True, work())
        except Exception as exc:
            try:
                error = pickle.loads(pickle.dumps(exc))
            except Exception:
                error = RuntimeError(f"{type(exc).__name__}: {exc}")
            comm.bcast_object((False, error))
            raise
    done, value = comm.bcast_object(outcome)
    if not done:
        raise value
    return value


def colour_stats(
    paths, resize=RESIZE, max_images=10000, workers=0, cache=None, comm=None, **options
):
    """The cached ``ColourStats`` of up to ``max_images`` evenly spaced ``paths``.

    ``cache``: the folder of the ``.npz`` files (default ``~/.cache/minidl/image-folders``;
    False: no cache). ``comm``: a communicator whose rank 0 alone measures (or reads the
    cache) and broadcasts (``on_rank_zero``). ``options`` go to ``measure``.
    """
    if comm is not None and comm.size > 1:
        return on_rank_zero(
            comm, lambda: colour_stats(paths, resize, max_images, workers, cache, **options)
        )
    paths = list(paths)
    if max_images and len(paths) > max_images:
        paths = [paths[i] for i in np.linspace(0, len(paths) - 1, max_images).astype(int)]
    folder = None
    if cache is not False:
        folder = Path(cache) if cache else cache_root() / "image-folders"
        target = folder / f"colour-{cache_key(paths, resize)[:32]}.npz"
        if target.is_file():
            with np.load(target) as saved:
                return ColourStats(
                    *(saved[k] for k in ("mean", "values", "vectors")), int(saved["images"])
                )
    stats = measure(paths, resize, workers, **options)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(
            buffer,
            mean=stats.mean,
            values=stats.eigenvalues,
            vectors=stats.eigenvectors,
            images=stats.images,
        )
        with atomic_write(target) as handle:
            handle.write(buffer.getvalue())
    return stats
