"""Image-folder checks under MPI, run as ``mpiexec -n N python folder_checks.py CHECK``
with ``FOLDER`` (an image folder with one corrupt training image, written by the test) and
``XDG_CACHE_HOME`` (a fresh cache) in the environment."""

import os
import sys

import numpy as np
from mpi_checks import digests, run_named_checks

from minidl.data import colour
from minidl.data.imageprep import ImageDecodeError
from minidl.train.config import TrainConfig, load_datasets


def counted(name, calls):
    """Replace ``colour.<name>`` by a wrapper that counts its calls in ``calls[name]``."""
    original = getattr(colour, name)

    def wrapper(*args, **kwargs):
        calls[name] += 1
        return original(*args, **kwargs)

    setattr(colour, name, wrapper)


def check_colour_stats_once(comm):
    """Rank 0 alone measures the colour statistics or reads their cache; every rank gets the
    same; an unreadable image met while measuring is raised on every rank."""
    calls = {"measure": 0, "cache_key": 0}
    counted("measure", calls)
    counted("cache_key", calls)
    config = TrainConfig(
        model="alexnet",
        dataset="folder",
        data_dir=os.environ["FOLDER"],
        crop_size=31,
        resize=36,
        data_workers=1,
    )
    try:
        load_datasets(config, comm)
    except ImageDecodeError as error:
        assert "zz_broken.JPEG: cannot decode the image" in str(error), error
    else:
        raise AssertionError("the corrupt image was not raised")
    config.skip_unreadable = True
    for attempt in range(2):  # measured, then read from the cache
        train, test = load_datasets(config, comm)
        assert test.stats is train.stats
        arrays = (train.stats.mean, train.stats.eigenvalues, train.stats.eigenvectors)
        assert len(set(digests(comm, np.concatenate([a.ravel() for a in arrays])))) == 1
        assert train.stats.images == 15, train.stats.images  # 5 per class, the corrupt left out
        expected = {"measure": 2, "cache_key": 2 + attempt} if comm.rank == 0 else {}
        assert {k: v for k, v in calls.items() if v} == expected, (comm.rank, attempt, calls)


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
