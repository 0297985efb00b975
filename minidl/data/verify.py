"""Is a dataset file the one it claims to be? SHA-256 against the published values.

Fashion-MNIST and MNIST use the same file names, so a folder of one passed
as the other would load without complaint and train on the wrong data. Each
file found is hashed (once per process while it is unchanged) and compared
with the values in ``catalog``: the published ``.gz`` files, and the
uncompressed contents where they are recorded. A file that is another
dataset's is refused by name; a file that matches nothing known is damaged
or foreign, and refused with the fix (download again, or ``verify=False``
for files prepared by hand). Uncompressed files of a dataset whose
uncompressed values are not recorded are only checked not to be another
dataset's.
"""

import functools
import os

from .catalog import DATASETS
from .download import file_sha256


class DatasetMismatchError(ValueError):
    """A dataset file is damaged, or belongs to another dataset."""


@functools.lru_cache(maxsize=32)
def _sha256_cached(path, inode, size, mtime_ns):
    return file_sha256(path)


def sha256_of(path):
    """The file's SHA-256, computed once per process while the file is unchanged."""
    stat = os.stat(path)
    return _sha256_cached(os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _known(spec, name, compressed):
    table = spec.sha256 if compressed else spec.raw_sha256
    return table.get(name)


def owner_of(digest):
    """(spec, file name) of the known file with this SHA-256, or None."""
    for spec in DATASETS.values():
        for table in (spec.sha256, spec.raw_sha256):
            for name, value in table.items():
                if value == digest:
                    return spec, name
    return None


def verify_file(spec, gz_name, path):
    """Raise ``DatasetMismatchError`` unless ``path`` is ``spec``'s file ``gz_name``
    (or unknowable)."""
    compressed = str(path).endswith(".gz")
    digest = sha256_of(path)
    expected = _known(spec, gz_name, compressed)
    if digest == expected:
        return
    owner = owner_of(digest)
    if owner is not None:
        other, other_name = owner
        raise DatasetMismatchError(
            f"{path} is {other.title}'s {other_name[:-3]}, not {spec.title}'s {gz_name[:-3]}: "
            f"pass the folder that holds {spec.title} (--data-dir), or train on "
            f"--dataset {other.name}"
        )
    if expected is None:
        return  # an uncompressed file whose published content is not recorded
    raise DatasetMismatchError(
        f"{path} is not the published {spec.title} file (SHA-256 {digest[:16]}..., expected "
        f"{expected[:16]}...): it is damaged or another dataset's. Delete it and run "
        f"'minidl data download {spec.name}', or, for files prepared on purpose, "
        "pass --no-verify-data (verify=False in code)"
    )
