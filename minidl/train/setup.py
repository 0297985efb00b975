"""The pieces a training run is assembled from: data, model, optimizer, schedule, its
folder name."""

import os
import time

from .. import models, optim
from ..data import MNIST, Compose, FashionMNIST, ImageFolder, RandomCrop, RandomHorizontalFlip
from ..models.alexnet import IMAGE_SIZE, paper_init

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
    return model.to(config.dtype).to(config.device)


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
