"""The pieces a training run is assembled from: data, model, optimizer, schedule, its folder name."""
import os
import time

from .. import models, optim
from ..data import Compose, FashionMNIST, MNIST, RandomCrop, RandomHorizontalFlip

DATASETS = {"fashion-mnist": FashionMNIST, "mnist": MNIST}
SCHEDULES = ("constant", "step", "cosine")


def make_optimizer(args, params):
    kwargs = dict(lr=args.lr, weight_decay=args.weight_decay, clip_grad_norm=args.clip_grad_norm)
    if args.optimizer in ("momentum", "nesterov"):
        kwargs["momentum"] = args.momentum
    return optim.OPTIMIZERS[args.optimizer](params, **kwargs)


def make_scheduler(args, opt):
    if args.lr_schedule == "step":
        then = optim.StepLR(opt, max(1, args.epochs // 3))
    elif args.lr_schedule == "cosine":
        then = optim.CosineAnnealingLR(opt, max(1, args.epochs - args.warmup_epochs))
    else:
        then = None
    if args.warmup_epochs > 0:
        return optim.LinearWarmup(opt, args.warmup_epochs, then=then)
    return then


def build_model(args, train_set):
    """The model ``--model`` names, sized for the data, in ``--dtype`` on ``--device``."""
    model = models.build(args.model, num_classes=len(train_set.classes),
                         in_channels=train_set.images.shape[1], conv_algo=args.conv_algo,
                         activation=args.activation)
    return model.to(args.dtype).to(args.device)


def load_datasets(args):
    cls = DATASETS[args.dataset]
    train, test = (cls(root=args.data_dir, train=split, verify=args.verify_data)
                   for split in (True, False))
    train = train.first(args.subset)
    return train, test


def augmentation(args):
    """AlexNet-style augmentation when ``--augment``: random crops (pad 2) and flips."""
    return Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()]) if args.augment else None


def default_run_dir(args):
    return os.path.join("runs", f"{args.model}-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")
