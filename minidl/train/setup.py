"""The pieces a training run is assembled from: data, optimizer, schedule, run directory.

A run directory holds ``config.json``, ``metrics.jsonl`` (one JSON object per
epoch), ``checkpoint.npz`` (written atomically after every epoch) and
``curves.png``.
"""
import json
import os
import time

from .. import optim
from .. import random as md_random
from ..data import ArrayDataset, Compose, FashionMNIST, MNIST, RandomCrop, RandomHorizontalFlip
from .checkpoint import save_checkpoint
from .metrics import append_metrics, plot_curves, read_metrics

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


def load_datasets(args):
    cls = DATASETS[args.dataset]
    train, test = cls(root=args.data_dir, train=True), cls(root=args.data_dir, train=False)
    if args.subset:
        train = ArrayDataset(train.images[:args.subset], train.labels[:args.subset], train.classes)
    return train, test


def augmentation(args):
    """AlexNet-style augmentation when ``--augment``: random crops (pad 2) and flips."""
    return Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()]) if args.augment else None


def default_run_dir(args):
    return os.path.join("runs", f"{args.model}-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")


def prepare_run_dir(args, out, size):
    """Rank 0's run directory with config.json; returns the paths of its files."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(vars(args) | {"world_size": size}, f, indent=2, default=str)
    return {name: os.path.join(out, name) for name in ("metrics.jsonl", "checkpoint.npz", "curves.png")}


def report_epoch(paths, args, epoch, lr, stats, result, model, opt, scheduler):
    """Rank 0: the epoch's metrics line, its printout, the checkpoint and the plot."""
    record = {"kind": "epoch", "epoch": epoch, "lr": lr,
              "train_loss": stats["loss"], "train_acc": stats["acc"],
              "test_loss": result["loss"], "test_acc": result["acc"],
              "train_images": stats["images"], "test_images": result["images"],
              "seconds": stats["seconds"], "images_per_s": stats["images_per_s"]}
    append_metrics(paths["metrics.jsonl"], record)
    print(f"epoch {epoch}/{args.epochs}: train loss {stats['loss']:.4f} "
          f"acc {100 * stats['acc']:.2f}% | test loss {result['loss']:.4f} "
          f"acc {100 * result['acc']:.2f}% | {stats['seconds']:.1f} s, "
          f"{stats['images_per_s']:.0f} img/s", flush=True)
    save_checkpoint(paths["checkpoint.npz"], model, opt, epoch=epoch,
                    rng=md_random.get_state(), config=vars(args),
                    scheduler=scheduler.state_dict() if scheduler else None)
    plot_curves(read_metrics(paths["metrics.jsonl"]), paths["curves.png"])


def resume_from(ckpt, args, model, opt, scheduler):
    """Load a checkpoint into the run; returns the epoch it ended."""
    saved = ckpt.meta.get("config", {})
    for key in ("model", "activation", "dataset", "optimizer"):
        if saved.get(key) not in (None, getattr(args, key)):
            raise ValueError(f"--resume: the checkpoint was trained with --{key} {saved[key]}, "
                             f"this run asks for {getattr(args, key)}; use the same {key}")
    model.load_state_dict(ckpt.model_state)
    if ckpt.optimizer_state is not None:
        opt.load_state_dict(ckpt.optimizer_state)
    if scheduler is not None and ckpt.meta.get("scheduler"):
        scheduler.load_state_dict(ckpt.meta["scheduler"])
    md_random.set_state(ckpt.meta["rng"])
    return int(ckpt.meta["epoch"])
