"""What minidl knows about each dataset: files, checksums, download base, statistics.

One ``DatasetSpec`` per dataset feeds the file lookup (``locate.py``), the
downloader (``download.py``), the dataset classes and the ``minidl data`` CLI.
"""

from dataclasses import dataclass

SPLITS = ("train", "test")


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset of four IDX files: train/test images and labels."""

    name: str  # the CLI name and the cache folder name
    title: str  # how messages spell it
    files: dict  # split -> (images file, labels file), gzip names
    sha256: dict  # file name -> SHA-256 of the published .gz file (checks downloads only)
    raw_sha256: dict  # file name -> SHA-256 of its uncompressed content (where known)
    fingerprints: dict  # file name -> verify.fingerprint of its content
    base_url: str  # files are fetched from base_url + file name
    mean: float  # of x/255 over the training set
    std: float
    classes: tuple
    debian_dirs: tuple = ()  # folders a Debian package installs the files to
    debian_package: str = ""

    def split_files(self, split):
        """The (images, labels) file names of ``split`` ('train' or 'test')."""
        if split not in self.files:
            raise ValueError(f"{self.title}: unknown split {split!r}; choose one of {SPLITS}")
        return self.files[split]

    def all_files(self):
        """All four file names, train first."""
        return tuple(name for split in SPLITS for name in self.files[split])


_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}

# SHA-256 values computed from the files of the Debian package
# dataset-fashion-mnist (0.0~git20200523.55506a9-1), which are the published
# ones, and of their uncompressed contents.
FASHION_MNIST = DatasetSpec(
    name="fashion-mnist",
    title="Fashion-MNIST",
    files=_MNIST_FILES,
    sha256={
        "train-images-idx3-ubyte.gz": (
            "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"
        ),
        "train-labels-idx1-ubyte.gz": (
            "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"
        ),
        "t10k-images-idx3-ubyte.gz": (
            "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"
        ),
        "t10k-labels-idx1-ubyte.gz": (
            "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"
        ),
    },
    raw_sha256={
        "train-images-idx3-ubyte.gz": (
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"
        ),
        "train-labels-idx1-ubyte.gz": (
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"
        ),
        "t10k-images-idx3-ubyte.gz": (
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"
        ),
        "t10k-labels-idx1-ubyte.gz": (
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"
        ),
    },
    fingerprints={
        "train-images-idx3-ubyte.gz": ("images", (60000, 28, 28), 3431114169, 631470052347),
        "train-labels-idx1-ubyte.gz": ("labels", (6000,) * 10),
        "t10k-images-idx3-ubyte.gz": ("images", (10000, 28, 28), 573469082, 105272563536),
        "t10k-labels-idx1-ubyte.gz": ("labels", (1000,) * 10),
    },
    base_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    mean=0.2860,
    std=0.3530,
    classes=(
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    debian_dirs=("/usr/share/datasets/fashion-mnist",),
    debian_package="dataset-fashion-mnist",
)

# SHA-256 values of the original gzip files (9,912,422 / 28,881 / 1,648,877 /
# 4,542 bytes), as listed identically by many independent download scripts and
# dataset catalogues; the mirror below serves those same files. Debian ships
# no MNIST data package, so there is no system folder to look in. The
# uncompressed contents' SHA-256 values are not recorded; the content is known
# by its fingerprint instead: the label counts per digit (LeCun et al., the
# MNIST page), and the image pixel sums and sums of squares that the widely
# published exact statistics imply: train mean 0.1306604762738429, std
# 0.3081078038564622; test mean 0.13251460584233699, std 0.3104802479305348
# (of x/255; sum = mean * 255 * N*784, squares = (std^2 + mean^2) * 255^2 *
# N*784, both integers to within 1e-3). The same formulas give Fashion-MNIST's
# sums above from its published statistics 0.2860405969887955 / 0.3530242445149223.
MNIST = DatasetSpec(
    name="mnist",
    title="MNIST",
    files=_MNIST_FILES,
    sha256={
        "train-images-idx3-ubyte.gz": (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
        ),
        "train-labels-idx1-ubyte.gz": (
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
        ),
        "t10k-images-idx3-ubyte.gz": (
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
        ),
        "t10k-labels-idx1-ubyte.gz": (
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
        ),
    },
    raw_sha256={},
    fingerprints={
        "train-images-idx3-ubyte.gz": ("images", (60000, 28, 28), 1567298545, 342590800147),
        "train-labels-idx1-ubyte.gz": (
            "labels",
            (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
        ),
        "t10k-images-idx3-ubyte.gz": ("images", (10000, 28, 28), 264923200, 58095386156),
        "t10k-labels-idx1-ubyte.gz": (
            "labels",
            (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009),
        ),
    },
    base_url="https://ossci-datasets.s3.amazonaws.com/mnist/",
    mean=0.1307,
    std=0.3081,
    classes=tuple(str(digit) for digit in range(10)),
)

DATASETS = {spec.name: spec for spec in (FASHION_MNIST, MNIST)}


def get_spec(name):
    """The ``DatasetSpec`` called ``name`` (a spec passes through); errors list the known names."""
    if isinstance(name, DatasetSpec):
        return name
    key = name.lower().replace("_", "-")
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}")
    return DATASETS[key]
