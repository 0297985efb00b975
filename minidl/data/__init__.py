"""Data: the IDX format, Fashion-MNIST/MNIST, the (distributed) DataLoader and augmentations.

The lowest layer of minidl: it imports nothing of minidl but ``backend``.
"""

from .augment import CenterCrop, Compose, Pad, RandomCrop, RandomHorizontalFlip
from .datasets import MNIST, ArrayDataset, FashionMNIST
from .download import DownloadError, download
from .idx import IDXError, load_idx, save_idx
from .loader import DataLoader
from .locate import DatasetNotFoundError, locate
from .verify import DatasetMismatchError

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
]
