"""Data: the IDX format, Fashion-MNIST/MNIST, image folders (ImageNet), the (distributed)
DataLoader and augmentations.

The lowest layer of minidl: it imports nothing of minidl but ``backend``.
"""

from .augment import CenterCrop, Compose, Pad, RandomCrop, RandomHorizontalFlip
from .colour import ColourStats, colour_stats
from .datasets import MNIST, ArrayDataset, FashionMNIST
from .download import DownloadError, download
from .folder import FolderError, ImageFolder
from .idx import IDXError, load_idx, save_idx
from .imageprep import ImageDecodeError, Preparation
from .loader import DataLoader
from .locate import DatasetNotFoundError, locate
from .verify import DatasetDamagedError, DatasetMismatchError

__all__ = [
    "load_idx",
    "save_idx",
    "IDXError",
    "FashionMNIST",
    "MNIST",
    "ArrayDataset",
    "DataLoader",
    "Compose",
    "Pad",
    "CenterCrop",
    "RandomCrop",
    "RandomHorizontalFlip",
    "download",
    "DownloadError",
    "locate",
    "DatasetNotFoundError",
    "DatasetMismatchError",
    "DatasetDamagedError",
    "ImageFolder",
    "FolderError",
    "ImageDecodeError",
    "Preparation",
    "ColourStats",
    "colour_stats",
]
