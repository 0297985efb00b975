"""The typed configuration of a training run, how messages name its options, and what a run
is built from (data, model, optimizer, schedule, recipes).

``TrainConfig`` holds what one process needs to train: what the run is
(model, data, optimizer, seed, dtype), how long, and where it is written.
``minidl.dist.DistConfig`` adds how ranks cooperate. The ``minidl train``
command builds both from its flags (one flag per field: ``--batch-size`` is
``batch_size``); a script builds them directly::

    config = TrainConfig(model="lenet5", epochs=3, optimizer="adam", lr=0.002, out="runs/a")
    md.train.fit(config)

Messages of the library mark the options they name with ``option(field)`` and are worded
where they are shown: ``worded(text, namer)`` names each by ``namer(field)``. An error
(``OptionMessage``: ``ConfigError``...) reads with fields (``lr``) as ``str()``, for the
Python API, and keeps its marked ``message``, which the command line words with its flags
(``--lr``); a message the library prints is worded with the namer its caller passed
(``fit(..., option=...)``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass

from .. import conv, models, optim
from ..data import MNIST, Compose, FashionMNIST, ImageFolder, RandomCrop, RandomHorizontalFlip
from ..layers import Recompute
from ..models.alexnet import IMAGE_SIZE, paper_init
from ..random import number_streams

DATASETS = {"fashion-mnist": FashionMNIST, "mnist": MNIST, "folder": ImageFolder}

# Krizhevsky, Sutskever & Hinton 2012, Sec. 5: SGD with momentum 0.9, weight decay 5e-4,
# batch 128, lr 0.01 divided by 10 when the validation error stops improving, their
# initialisation, "roughly 90 cycles"; options given anew override it. The validation batch
# (not the paper's) is the training batch: 1000 images of 224x224 would take 600 MB as input
RECIPES = {
    "alexnet-2012": {
        "model": "alexnet",
        "optimizer": "momentum",
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "batch_size": 128,
        "lr": 0.01,
        "lr_schedule": "plateau",
        "init": "paper",
        "epochs": 90,
        "test_batch_size": 128,
    }
}


def make_optimizer(config, params):
    """The update rule ``config.optimizer`` names, over ``params``."""
    kwargs = dict(
        lr=config.lr, weight_decay=config.weight_decay, clip_grad_norm=config.clip_grad_norm
    )
    if config.optimizer in ("momentum", "nesterov"):
        kwargs["momentum"] = config.momentum
    return optim.OPTIMIZERS[config.optimizer](params, **kwargs)


def make_scheduler(config, opt):
    """The learning-rate schedule of ``config`` driving ``opt`` (None: constant)."""
    if config.lr_schedule == "plateau":
        return optim.ReduceOnPlateau(opt)
    if config.lr_schedule == "step":
        then = optim.StepLR(opt, max(1, config.epochs // 3))
    elif config.lr_schedule == "cosine":
        then = optim.CosineAnnealingLR(opt, max(1, config.epochs - config.warmup_epochs))
    else:
        then = None
    if config.warmup_epochs > 0:
        return optim.LinearWarmup(opt, config.warmup_epochs, then=then)
    return then


def crop_size(config):
    """The folder crops of ``config``: ``crop_size``, else the AlexNet variant's own."""
    return config.crop_size or IMAGE_SIZE[config.variant or "torchvision"]


def build_model(config, train_set):
    """The model ``config.model`` names, sized for the data, in its dtype on its device."""
    options = {}
    if config.model == "alexnet":
        side = crop_size(config) if config.dataset == "folder" else train_set.images.shape[-1]
        options = dict(variant=config.variant or "torchvision", image_size=side)
        if config.dropout is not None:
            options["dropout"] = config.dropout
    model = models.build(
        config.model,
        num_classes=len(train_set.classes),
        in_channels=getattr(train_set, "channels", None) or train_set.images.shape[1],
        conv_algo=config.conv_algo,
        activation=config.activation,
        **options,
    )
    if config.init == "paper":
        paper_init(model)
    number_streams(model)  # dropout masks keyed by layer: the same on every layout
    return recomputed(model, config.recompute).to(config.dtype).to(config.device)


def recomputed(model, segments):
    """``model`` (a ``Sequential``) recomputing ``segments`` segments in backward
    (``L.Recompute``), or as it is for 0 or None; more segments than layers are refused."""
    if not segments:
        return model
    if segments > len(model):
        raise ConfigError(
            f"{option('recompute')} {segments}: the model has {len(model)} layers; choose 1 to "
            f"{len(model)} segments (0: none)"
        )
    return Recompute(model, segments)


def load_split(config, train, stats=None, comm=None):
    """The training (``train``) or test split of ``config.dataset``; an image folder's
    validation split takes the training split's colour ``stats``, which under MPI (``comm``)
    rank 0 alone measures."""
    if config.dataset != "folder":
        cls = DATASETS[config.dataset]
        return cls(root=config.data_dir, train=train, verify=config.verify_data)
    return ImageFolder(
        config.data_dir,
        train,
        crop_size(config),
        config.resize,
        config.ten_crop,
        config.pca_std,
        stats,
        workers=config.data_workers,
        skip_unreadable=config.skip_unreadable,
        comm=comm,
    )


def load_datasets(config, comm=None):
    """(train, test) of ``config.dataset``; each cut to ``config.subset`` and
    ``config.test_subset``."""
    train = load_split(config, True, comm=comm)
    test = load_split(config, False, getattr(train, "stats", None))
    return train.first(config.subset), test.first(config.test_subset)


def augmentation(config):
    """AlexNet-style augmentation when ``config.augment``: random crops (pad 2) and flips."""
    if not config.augment:
        return None
    return Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()])


def default_run_dir(config):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{config.model}-{config.dataset}-{stamp}")


SCHEDULES = ("constant", "step", "cosine", "plateau")
DTYPES = ("float32", "float64")
DEVICES = ("cpu", "cuda")
INITS = ("default", "paper")

_MARK = "\x1f"  # brackets a field in a message (the unit separator: no value holds it)


def option(field: str) -> str:
    """The option ``field`` marked in a message, for ``worded`` to name."""
    return f"{_MARK}{field}{_MARK}"


def worded(text: str, namer=str) -> str:
    """``text`` with each option marked by ``option`` named ``namer(field)`` (``--lr``)."""
    parts = text.split(_MARK)
    parts[1::2] = map(namer, parts[1::2])
    return "".join(parts)


class OptionMessage:
    """A mixin for exceptions whose message names options: ``str()`` names them as fields
    (``lr``); ``message`` keeps them marked, for a caller to word with its own names."""

    @property
    def message(self) -> str:
        """The message with its options marked."""
        return super().__str__()

    def __str__(self):
        return worded(self.message)


class ConfigError(OptionMessage, ValueError):
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
    recompute: int | None = None  # segments recomputed in backward (L.Recompute); 0/None: none
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
        check_number("recompute", self.recompute, integer=True, optional=True)
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
