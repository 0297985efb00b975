"""The pieces a training run is assembled from: data, model, optimizer, schedule, its
folder name."""

import os
import time

from .. import models, optim
from ..data import MNIST, Compose, FashionMNIST, RandomCrop, RandomHorizontalFlip

DATASETS = {"fashion-mnist": FashionMNIST, "mnist": MNIST}


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
    if config.lr_schedule == "step":
        then = optim.StepLR(opt, max(1, config.epochs // 3))
    elif config.lr_schedule == "cosine":
        then = optim.CosineAnnealingLR(opt, max(1, config.epochs - config.warmup_epochs))
    else:
        then = None
    if config.warmup_epochs > 0:
        return optim.LinearWarmup(opt, config.warmup_epochs, then=then)
    return then


def build_model(config, train_set):
    """The model ``config.model`` names, sized for the data, in its dtype on its device."""
    model = models.build(
        config.model,
        num_classes=len(train_set.classes),
        in_channels=train_set.images.shape[1],
        conv_algo=config.conv_algo,
        activation=config.activation,
    )
    return model.to(config.dtype).to(config.device)


def load_datasets(config):
    """(train, test) of ``config.dataset``; the training set cut to ``config.subset``."""
    cls = DATASETS[config.dataset]
    train, test = (
        cls(root=config.data_dir, train=split, verify=config.verify_data) for split in (True, False)
    )
    return train.first(config.subset), test


def augmentation(config):
    """AlexNet-style augmentation when ``config.augment``: random crops (pad 2) and flips."""
    if not config.augment:
        return None
    return Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()])


def default_run_dir(config):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{config.model}-{config.dataset}-{stamp}")
