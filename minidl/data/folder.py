"""A dataset of image files in class folders: the ImageNet layout, or any folder like it.

Layout under ``root``::

    train/CLASS/*.JPEG          one sub-folder per class (the class names, sorted, are the
                                labels 0..K-1)
    val/CLASS/*                 the same classes (a subset is fine), or
    val/*  + val_labels.txt     a flat folder and a label file: one ``FILE CLASS`` line per
                                image (CLASS a class folder name, or its index)

Images are decoded with Pillow (the ``images`` extra) when a batch needs them,
and prepared as the AlexNet paper does (``imageprep``): training samples get
a random crop, a flip and colour noise, validation samples the centre crop
(or ten crops); both subtract the training set's per-channel mean
(``colour``). ``load(i, rng)`` is what the ``DataLoader`` calls, from worker
threads; it draws every random choice from ``rng``.
"""

import os
from pathlib import Path

import numpy as np

from .colour import colour_stats
from .imageprep import CROP, PCA_STD, RESIZE, Preparation, load_patch

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".pgm", ".gif", ".tif", ".tiff", ".webp")
VAL_LABELS = "val_labels.txt"


class FolderError(ValueError):
    """An image folder that does not have the expected layout; says which layout is expected."""


def _images_in(folder):
    return sorted(
        entry.path
        for entry in os.scandir(folder)
        if entry.is_file() and entry.name.lower().endswith(IMAGE_SUFFIXES)
    )


def scan_class_folders(folder, classes=None):
    """(classes, paths, labels) of ``folder/CLASS/*`` images; ``classes`` fixes the label
    order (the validation split uses the training split's)."""
    found = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    classes = tuple(found) if classes is None else tuple(classes)
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise FolderError(
            f"{folder}: class folders {unknown[:5]} are not training classes; the validation "
            "split may only hold classes that train/ has"
        )
    paths, labels = [], []
    for label, name in enumerate(classes):
        if name in found:
            files = _images_in(Path(folder) / name)
            paths += files
            labels += [label] * len(files)
    return classes, paths, labels


def read_label_file(path, folder, classes):
    """(paths, labels) of a ``FILE CLASS`` label file (CLASS: a name or an index)."""
    index = {name: i for i, name in enumerate(classes)}
    paths, labels = [], []
    with open(path) as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2:
                raise FolderError(f"{path}, line {number}: expected 'FILE CLASS', got {line!r}")
            name, label = fields
            if label in index:
                label = index[label]
            elif label.isdigit() and int(label) < len(classes):
                label = int(label)
            else:
                raise FolderError(
                    f"{path}, line {number}: {label!r} is neither a class folder of train/ "
                    f"nor an index below {len(classes)}"
                )
            paths.append(str(Path(folder) / name))
            labels.append(label)
    return paths, labels


class ImageFolder:
    """The ``train`` or ``val`` split of an image folder (module doc), prepared as AlexNet's.

    ``crop`` (224; 227 for the original network) and ``resize`` (256) are the
    paper's sizes; ``ten_crop`` makes each validation sample the ten crops
    ``(10, 3, crop, crop)``; ``pca_std`` the colour noise's alpha std (0: none).
    ``stats``: the training set's ``colour.ColourStats`` (default: measured on
    at most ``stats_images`` training images, cached). ``val_labels``: the
    label file of a flat ``val/`` (default ``root/val_labels.txt``). ``workers``
    and ``skip_unreadable`` apply to measuring the colour statistics (the
    ``DataLoader`` has its own); under MPI, ``comm`` makes rank 0 alone measure them
    (``colour.colour_stats``).
    """

    def __init__(
        self,
        root,
        train: bool = True,
        crop: int = CROP["torchvision"],
        resize: int = RESIZE,
        ten_crop: bool = False,
        pca_std: float = PCA_STD,
        stats=None,
        stats_images: int = 10000,
        val_labels=None,
        workers: int = 0,
        skip_unreadable: bool = False,
        comm=None,
    ):
        self.root, self.train = Path(root), train
        train_dir = self.root / "train"
        if not train_dir.is_dir():
            raise FolderError(
                f"{self.root} has no train/ folder: an image folder holds train/CLASS/* and "
                "val/CLASS/* (or val/* with val_labels.txt)"
            )
        self.classes, train_paths, train_labels = scan_class_folders(train_dir)
        if not self.classes:
            raise FolderError(f"{train_dir}: no class sub-folders (train/CLASS/*.JPEG)")
        if train:
            paths, labels = train_paths, train_labels
        else:
            paths, labels = self._validation(val_labels)
        if not paths:
            split = "train" if train else "val"
            raise FolderError(f"{self.root / split}: no images ({', '.join(IMAGE_SUFFIXES)})")
        if stats is None:
            stats = colour_stats(
                train_paths,
                resize,
                stats_images,
                workers,
                comm=comm,
                skip_unreadable=skip_unreadable,
            )
        self.stats = stats
        self.samples = list(paths)
        self.labels = np.asarray(labels, dtype=np.int64)
        colour = (stats.mean, stats.eigenvalues, stats.eigenvectors)
        self.preparation = Preparation(train, crop, resize, *colour, pca_std, ten_crop)

    def _validation(self, val_labels):
        val_dir = self.root / "val"
        label_file = Path(val_labels) if val_labels else self.root / VAL_LABELS
        if not val_dir.is_dir():
            raise FolderError(
                f"{self.root} has no val/ folder (val/CLASS/* or val/* + {VAL_LABELS})"
            )
        if any(entry.is_dir() for entry in os.scandir(val_dir)):
            return scan_class_folders(val_dir, self.classes)[1:]
        if not label_file.is_file():
            raise FolderError(
                f"{val_dir} holds no class folders and {label_file} does not exist: give each "
                "validation image its class in a label file of 'FILE CLASS' lines"
            )
        return read_label_file(label_file, val_dir, self.classes)

    @property
    def sample_shape(self):
        """The shape of one prepared sample."""
        return self.preparation.shape

    @property
    def channels(self):
        return 3

    def __len__(self):
        return len(self.labels)

    def load(self, index, rng=None):
        """Sample ``index`` prepared (float32); raises ``ImageDecodeError`` for a bad file."""
        return self.preparation(load_patch(self.samples[index], self.preparation.resize), rng)

    def __getitem__(self, index):
        return self.load(index, np.random.default_rng(index)), self.labels[index]

    def first(self, n):
        """A copy holding ``n`` samples (all when ``n`` is None or 0), taken round-robin over
        the classes (each class's first image, then each one's second...), so that a subset
        of a class-sorted folder still holds every class."""
        if not n:
            return self
        within = np.zeros(len(self.labels), dtype=np.int64)  # index of each image in its class
        for label in np.unique(self.labels):
            members = np.flatnonzero(self.labels == label)
            within[members] = np.arange(len(members))
        keep = np.sort(np.lexsort((self.labels, within))[:n])
        subset = object.__new__(ImageFolder)
        subset.__dict__.update(self.__dict__)
        subset.samples = [self.samples[i] for i in keep]
        subset.labels = self.labels[keep]
        return subset

    def __repr__(self):
        split = "train" if self.train else "val"
        return (
            f"ImageFolder({split}, {len(self)} images, {len(self.classes)} classes from "
            f"{self.root})"
        )
