"""Is a dataset file the one it claims to be? Decided by its decoded content, never its container.

The same images and labels arrive gzipped by different tools (other gzip
headers, levels, several members) or uncompressed, so the compressed bytes
say nothing about identity. Each file is decoded, and its *content* (the IDX
bytes after gunzip) is identified, in this order:

1. its SHA-256, where ``catalog`` records the dataset's uncompressed values
   (Fashion-MNIST): exact identity;
2. its fingerprint (``catalog.fingerprint``): for labels the count of each
   class, for images the shape, the sum and the sum of squares of the pixels.
   MNIST is known this way: its published statistics (training mean
   0.1306604762738429 and std 0.3081078038564622 of x/255) are exact functions
   of those integer sums, and the same computation reproduces Fashion-MNIST's
   published statistics digit for digit. A fingerprint catches a wrong
   dataset and any change of a label or pixel value short of a deliberate
   forgery; it does not see images or labels reordered among themselves.

Outcomes: a file that does not decode is *damaged* (with the byte where
decoding failed); a file whose content is another dataset's is refused by
name ("this is Fashion-MNIST's ..., not MNIST's ..."); a file that decodes
but matches nothing known is a modified file or a different dataset. Each
message says what to do.
"""

import hashlib

import numpy as np

from .catalog import DATASETS


class DatasetMismatchError(ValueError):
    """A dataset file is damaged, or belongs to another dataset."""


class DatasetDamagedError(DatasetMismatchError):
    """A dataset file does not decode: a corrupt or truncated gzip stream or IDX body."""


def content_sha256(data):
    """SHA-256 hex digest of a file's decoded (uncompressed IDX) bytes."""
    return hashlib.sha256(data).hexdigest()


def fingerprint(array, chunk=1 << 22):
    """What identifies a uint8 IDX array without its bytes: per-class counts of labels (1-D), or
    (shape, pixel sum, sum of squares) of images, from a histogram taken in chunks."""
    flat = array.reshape(-1)
    counts = np.zeros(256, np.int64)
    for start in range(0, flat.size, chunk):
        counts += np.bincount(flat[start : start + chunk], minlength=256)
    if array.ndim == 1:
        return ("labels", tuple(int(c) for c in np.trim_zeros(counts, "b")))
    values = np.arange(256, dtype=np.int64)
    return ("images", tuple(array.shape), int(counts @ values), int(counts @ values**2))


def identify(digest, array):
    """(spec, file name, how) of the known file with this content, or None.

    ``digest`` is the content's SHA-256 and ``array`` its decoded array; a
    recorded SHA-256 is exact and is tried before the ``fingerprint``.
    """
    for spec in DATASETS.values():
        for name, value in spec.raw_sha256.items():
            if value == digest:
                return spec, name, "SHA-256"
    if array.dtype != np.uint8:
        return None
    print_ = fingerprint(array)
    for spec in DATASETS.values():
        for name, value in spec.fingerprints.items():
            if value == print_ and name not in spec.raw_sha256:
                return spec, name, "fingerprint"
    return None


def damaged(spec, path, defect):
    """The error for a file of ``spec`` that does not decode: the defect and the fix."""
    return DatasetDamagedError(
        f"{path} is damaged: {defect}. Delete it and run 'minidl data download {spec.name}' "
        "(or copy it again from a good source)"
    )


def verify_content(spec, gz_name, path, digest, array):
    """Raise ``DatasetMismatchError`` unless the decoded content of ``path`` is ``spec``'s file
    ``gz_name`` (``digest``: the content's SHA-256, ``array``: the decoded array)."""
    found = identify(digest, array)
    if found is not None and found[:2] == (spec, gz_name):
        return
    if found is not None:
        other, other_name, how = found
        dataset = f"this is {other.title}, not {spec.title}" if other is not spec else "wrong file"
        raise DatasetMismatchError(
            f"{path}: {dataset}: its content is {other.title}'s {other_name[:-3]} (by {how}), "
            f"not {spec.title}'s {gz_name[:-3]}. Pass the folder that holds {spec.title} "
            f"(--data-dir, root=), or train on --dataset {other.name}"
        )
    expected = spec.fingerprints.get(gz_name)
    if expected is None and gz_name not in spec.raw_sha256:
        return  # nothing recorded to check against (a spec made for synthetic files)
    raise DatasetMismatchError(
        f"{path} decodes but is not {spec.title}'s {gz_name[:-3]}: a modified file or another "
        f"dataset (content SHA-256 {digest[:16]}...; {_describe(array)}, expected "
        f"{_describe(expected)}). Delete it and run 'minidl data download {spec.name}', or, "
        "for files prepared on purpose, pass --no-verify-data (verify=False in code)"
    )


def _describe(print_):
    if print_ is None:
        return "unknown"
    if isinstance(print_, np.ndarray):
        if print_.dtype != np.uint8:
            return f"{print_.dtype} array {print_.shape}"
        print_ = fingerprint(print_)
    if print_[0] == "labels":
        return f"labels with class counts {list(print_[1])}"
    _, shape, total, squares = print_
    return f"images {shape}, pixel sum {total}, sum of squares {squares}"
