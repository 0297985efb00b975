"""The typed configuration of a training run, and how messages name its options.

``TrainConfig`` holds what one process needs to train: what the run is
(model, data, optimizer, seed, dtype), how long, and where it is written.
``minidl.dist.DistConfig`` adds how ranks cooperate. The ``minidl train``
command builds both from its flags (one flag per field: ``--batch-size`` is
``batch_size``); a script builds them directly::

    config = TrainConfig(model="lenet5", epochs=3, optimizer="adam", lr=0.002, out="runs/a")
    md.train.fit(config)

Messages of the library name an option through ``option(field)``: the field
itself (``lr``) for the Python API; the command line makes them its flags
(``--lr``) with ``name_options(...)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import conv, models, optim
from .setup import DATASETS

SCHEDULES = ("constant", "step", "cosine", "plateau")
DTYPES = ("float32", "float64")
DEVICES = ("cpu", "cuda")
INITS = ("default", "paper")

_option_name = str


def option(field: str) -> str:
    """How messages name the option ``field`` (``lr``; ``--lr`` under the command line)."""
    return _option_name(field)


def name_options(namer) -> None:
    """Make every later message name options with ``namer(field)`` (the CLI's flags)."""
    global _option_name
    _option_name = namer


class ConfigError(ValueError):
    """An option value that cannot work; the message names the option and the fix."""


def check_choice(field, value, choices):
    if value not in choices:
        raise ConfigError(
            f"{option(field)} {value!r}: choose one of {', '.join(map(str, choices))}"
        )


def check_number(field, value, minimum=0.0, positive=False, integer=False, optional=False):
    """Refuse a value that is not a finite number >= ``minimum`` (> 0 with ``positive``)."""
    if value is None and optional:
        return
    kind_ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if (
        isinstance(value, bool)
        or not kind_ok
        or not math.isfinite(value)
        or value < minimum
        or (positive and value <= 0)
    ):
        what = "an integer" if integer else "a finite number"
        bound = "> 0" if positive else f">= {minimum:g}"
        raise ConfigError(f"{option(field)} {value!r}: must be {what} {bound}")


@dataclass
class TrainConfig:
    """One training run as this process sees it; every field is a ``minidl train`` flag."""

    model: str = "lenet5"
    activation: str = "relu"
    dataset: str = "fashion-mnist"
    epochs: int = 3
    batch_size: int = 64  # samples per step per process
    test_batch_size: int = 1000
    optimizer: str = "momentum"
    lr: float = 0.01
    momentum: float = 0.9  # momentum and nesterov
    weight_decay: float = 0.0
    clip_grad_norm: float | None = None
    lr_schedule: str = "constant"  # step: x0.1 every third of the epochs; cosine: to 0;
    # plateau: x0.1 when the validation error stopped improving for 2 epochs (AlexNet's)
    warmup_epochs: int = 0
    conv_algo: str = "auto"
    device: str = "cpu"
    augment: bool = False  # random crops (pad 2) and flips
    subset: int | None = None  # the first N training images only
    test_subset: int | None = None  # evaluate on the first N test images only
    data_dir: str | None = None  # the only folder looked in, when given
    verify_data: bool = True  # the files must be the dataset's published ones
    dtype: str = "float32"
    # AlexNet on an image folder (--dataset folder): see models.alexnet and data.folder
    variant: str | None = None  # alexnet: original or torchvision (default torchvision)
    init: str = "default"  # paper: Krizhevsky et al.'s N(0, 0.01) weights and 0/1 biases
    dropout: float | None = None  # alexnet: the classifier's dropout p (None: the variant's)
    crop_size: int | None = None  # folder crops (default: the variant's 227 or 224)
    resize: int = 256  # folder images: shorter side and central patch
    ten_crop: bool = False  # evaluate on the paper's ten crops (softmax averaged)
    pca_std: float = 0.1  # colour augmentation: alpha ~ N(0, pca_std); 0: none
    data_workers: int = 2  # threads decoding folder images
    skip_unreadable: bool = False  # leave out (and count) images that cannot be decoded
    dtype: str = "float32"
    deterministic: bool = True  # 'auto' algorithms by a fixed rule, not by timing
    seed: int = 0
    threads: int | None = None  # BLAS/FFT threads and minidl's own (None: all cores)
    progress: bool = True  # a progress bar per epoch
    trace: bool = False  # a Chrome-trace timeline (trace.json) in the run folder
    out: str | None = None  # the run folder (None: runs/MODEL-DATASET-TIME)
    overwrite: bool = False  # replace a run already in ``out``

    def check(self) -> TrainConfig:
        """Refuse values that cannot work, naming the option; returns the config."""
        check_choice("model", self.model, list(models.MODELS))
        check_choice("activation", self.activation, list(models.ACTIVATIONS))
        check_choice("dataset", self.dataset, list(DATASETS))
        check_choice("optimizer", self.optimizer, list(optim.OPTIMIZERS))
        check_choice("lr_schedule", self.lr_schedule, SCHEDULES)
        check_choice("conv_algo", self.conv_algo, ("auto", *conv.ALGORITHMS))
        check_choice("device", self.device, DEVICES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("init", self.init, INITS)
        if self.dataset == "folder" and self.augment:
            raise ConfigError(
                f"{option('augment')} is for the IDX datasets: {option('dataset')} folder already "
                f"crops, flips and adds colour noise (see {option('pca_std')})"
            )
        if self.dataset == "folder" and not self.data_dir:
            raise ConfigError(
                f"{option('dataset')} folder needs {option('data_dir')} DIR, the folder holding "
                "train/CLASS/* and val/"
            )
        if self.variant is not None and self.model != "alexnet":
            raise ConfigError(f"{option('variant')} applies to {option('model')} alexnet only")
        if self.model == "alexnet":
            check_choice("variant", self.variant or "torchvision", ("original", "torchvision"))
        if self.dropout is not None and self.model != "alexnet":
            raise ConfigError(f"{option('dropout')} applies to {option('model')} alexnet only")
        check_number("dropout", self.dropout, optional=True)
        if self.dropout is not None and self.dropout >= 1:
            raise ConfigError(f"{option('dropout')} {self.dropout} must lie in [0, 1)")
        if self.init == "paper" and self.model != "alexnet":
            raise ConfigError(f"{option('init')} paper is AlexNet's: use {option('model')} alexnet")
        if self.lr_schedule == "plateau" and self.warmup_epochs:
            raise ConfigError(f"{option('lr_schedule')} plateau does not follow a warmup")
        check_number("crop_size", self.crop_size, positive=True, integer=True, optional=True)
        check_number("resize", self.resize, positive=True, integer=True)
        check_number("pca_std", self.pca_std)
        check_number("data_workers", self.data_workers, integer=True)
        for field in ("epochs", "batch_size", "test_batch_size"):
            check_number(field, getattr(self, field), positive=True, integer=True)
        for field in ("subset", "test_subset", "threads"):
            check_number(field, getattr(self, field), positive=True, integer=True, optional=True)
        check_number("warmup_epochs", self.warmup_epochs, integer=True)
        check_number("seed", self.seed, integer=True)
        check_number("lr", self.lr, positive=True)
        check_number("momentum", self.momentum)
        check_number("weight_decay", self.weight_decay)
        check_number("clip_grad_norm", self.clip_grad_norm, positive=True, optional=True)
        return self

    @classmethod
    def from_record(cls, record: dict) -> TrainConfig:
        """The configuration a run folder or checkpoint kept (other keys are left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in record.items() if key in names})

    def replace(self, **changes) -> TrainConfig:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def record(self) -> dict:
        """The options as ``config.json`` and the checkpoint keep them."""
        return dataclasses.asdict(self)
