"""``minidl train`` and ``minidl eval``: the command-line face of the training loop.

A run directory holds ``config.json``, ``metrics.jsonl`` (one JSON object per
epoch), ``checkpoint.npz`` (written atomically after every epoch) and
``curves.png``.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from .. import models, optim
from .. import random as md_random
from ..conv import ALGORITHMS as CONV_ALGORITHMS
from ..data import ArrayDataset, DataLoader, FashionMNIST, MNIST
from ..data import Compose, RandomCrop, RandomHorizontalFlip
from .checkpoint import load_checkpoint, save_checkpoint
from .loop import NonFiniteLossError, evaluate, train_epoch
from .metrics import append_metrics, plot_curves, read_metrics

DATASETS = {"fashion-mnist": FashionMNIST, "mnist": MNIST}
SCHEDULES = ("constant", "step", "cosine")


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def add_train_arguments(p):
    p.add_argument("--model", default="lenet5", choices=list(models.MODELS))
    p.add_argument("--activation", default="relu", choices=list(models.ACTIVATIONS))
    p.add_argument("--dataset", default="fashion-mnist", choices=list(DATASETS))
    p.add_argument("--epochs", type=positive_int, default=3)
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="samples per step per process")
    p.add_argument("--test-batch-size", type=positive_int, default=1000)
    p.add_argument("--optimizer", default="momentum", choices=list(optim.OPTIMIZERS))
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9, help="for momentum and nesterov")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--clip-grad-norm", type=float, default=None)
    p.add_argument("--lr-schedule", default="constant", choices=SCHEDULES,
                   help="step: x0.1 every third of the epochs; cosine: down to 0 at the end")
    p.add_argument("--warmup-epochs", type=int, default=0)
    p.add_argument("--conv-algo", default="auto", choices=("auto",) + tuple(CONV_ALGORITHMS))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--augment", action="store_true", help="random crop (pad 2) and flips")
    p.add_argument("--subset", type=positive_int, default=None,
                   help="train on the first N training images only")
    p.add_argument("--data-dir", default=None, help="folder with the IDX files")
    p.add_argument("--out", default=None, help="run directory (default runs/MODEL-DATASET-TIME)")
    p.add_argument("--resume", default=None, metavar="CKPT",
                   help="continue from a checkpoint.npz up to --epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive_int, default=None,
                   help="BLAS/FFT threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _limit_threads(n):
    """Cap the BLAS thread pools; the returned controller must stay alive."""
    if n is None:
        return None
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=n)


def make_optimizer(args, model):
    kwargs = dict(lr=args.lr, weight_decay=args.weight_decay, clip_grad_norm=args.clip_grad_norm)
    if args.optimizer in ("momentum", "nesterov"):
        kwargs["momentum"] = args.momentum
    return optim.OPTIMIZERS[args.optimizer](model.parameters(), **kwargs)


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


def default_run_dir(args):
    return os.path.join("runs", f"{args.model}-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")


def run_train(args, comm=None):
    """Train as ``args`` says; returns 0, or 3 when the loss became NaN/inf."""
    threads = _limit_threads(args.threads)  # noqa: F841  (kept alive for the run)
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    md_random.manual_seed(args.seed)
    train_set, test_set = load_datasets(args)
    model = models.build(args.model, num_classes=len(train_set.classes),
                         in_channels=train_set.images.shape[1], conv_algo=args.conv_algo,
                         activation=args.activation)
    model.to(args.device)
    opt = make_optimizer(args, model)
    scheduler = make_scheduler(args, opt)
    start_epoch, out = 0, args.out
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        start_epoch = resume_from(ckpt, args, model, opt, scheduler)
        out = out or os.path.dirname(os.path.abspath(args.resume))
    out = out or default_run_dir(args)
    transform = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()]) if args.augment else None
    train_loader = DataLoader(train_set, args.batch_size, shuffle=True, seed=args.seed,
                              drop_last=False, rank=rank, world_size=size, transform=transform)
    test_loader = DataLoader(test_set, args.test_batch_size, rank=rank, world_size=size)
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(vars(args) | {"world_size": size}, f, indent=2, default=str)
    paths = {name: os.path.join(out, name) for name in ("metrics.jsonl", "checkpoint.npz", "curves.png")}
    result = None
    for epoch in range(start_epoch + 1, args.epochs + 1):
        train_loader.set_epoch(epoch - 1)
        lr = opt.lr
        try:
            stats = train_epoch(model, opt, train_loader, epoch, args.device,
                                progress=rank == 0 and not args.no_progress, comm=comm)
        except NonFiniteLossError as exc:
            if rank == 0:
                print(f"minidl train: {exc}", file=sys.stderr)
            return 3
        result = evaluate(model, test_loader, len(train_set.classes), args.device, comm=comm)
        if scheduler is not None:
            scheduler.step()
        if rank == 0:
            record = {"kind": "epoch", "epoch": epoch, "lr": lr,
                      "train_loss": stats["loss"], "train_acc": stats["acc"],
                      "test_loss": result["loss"], "test_acc": result["acc"],
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
    if rank == 0:
        if result is not None:
            print(f"test accuracy {100 * result['acc']:.2f}% after epoch {args.epochs}; "
                  f"run directory: {out}")
        else:
            print(f"nothing to do: the checkpoint is already at epoch {start_epoch}; "
                  f"raise --epochs to train further")
    return 0


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


def add_eval_arguments(p):
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz from minidl train")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-size", type=positive_int, default=1000)


def run_eval(args):
    """Print the test accuracy and the confusion matrix of a checkpoint."""
    ckpt = load_checkpoint(args.checkpoint)
    config = ckpt.meta["config"]
    test_set = DATASETS[config["dataset"]](root=args.data_dir or config.get("data_dir"), train=False)
    model = models.build(config["model"], num_classes=len(test_set.classes),
                         in_channels=test_set.images.shape[1], conv_algo=config["conv_algo"],
                         activation=config.get("activation", "relu"))
    model.load_state_dict(ckpt.model_state)
    model.to(args.device)
    result = evaluate(model, DataLoader(test_set, args.batch_size), len(test_set.classes),
                      args.device)
    print(f"{config['model']} on {config['dataset']} (epoch {ckpt.meta['epoch']}): "
          f"test accuracy {100 * result['acc']:.2f}% over {result['images']} images")
    print(format_confusion(result["confusion"], test_set.classes))
    return 0


def format_confusion(confusion, classes):
    """The confusion matrix as text: rows are true classes, columns predictions."""
    width = max(6, len(str(confusion.max())) + 1)
    names = [c[:12] for c in classes]
    label_w = max(len(n) for n in names) + 1
    head = " " * label_w + "".join(f"{i:>{width}}" for i in range(len(names)))
    rows = [f"{n:<{label_w}}" + "".join(f"{v:>{width}}" for v in row) + f"   {i}"
            for i, (n, row) in enumerate(zip(names, confusion))]
    recall = np.diag(confusion) / np.maximum(confusion.sum(axis=1), 1)
    rows.append("per-class accuracy: " + ", ".join(f"{100 * r:.1f}" for r in recall))
    return "\n".join(["confusion matrix (rows: true class, columns: predicted)", head] + rows)
