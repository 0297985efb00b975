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
from .. import dist
from ..dist import ALLREDUCE_ALGORITHMS
from ..dist.compression import SPEC_HELP, make_compressor
from ..dist.consistency import MODES_HELP, global_train_stats, make_session, parse_dist_mode
from ..dist.ps import TrainingAborted
from ..dist.ps_server import DEFAULT_POLL_INTERVAL
from ..dist.straggler import Straggler, parse_straggler
from ..dist.telemetry import summarize_epoch
from .checkpoint import load_checkpoint, save_checkpoint
from .loop import NonFiniteLossError, evaluate, train_epoch
from .workers import run_workers
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
    p.add_argument("--workers", type=positive_int, default=1,
                   help="data-parallel processes on this machine (needs the mpi extra); "
                        "--batch-size stays the samples per step")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="BLAS/FFT threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dist", default=None, type=_dist_mode, metavar="MODE",
                   help=f"{MODES_HELP} (start under mpiexec). sync: gradients averaged by "
                        "allreduce; bsp/ssp:S/asp: parameter server on ranks 0..K-1, workers "
                        "on the rest; avg:H: weights averaged every H steps; easgd: elastic "
                        "averaging with a center on the server. The batch size is per worker")
    p.add_argument("--servers", type=positive_int, default=1,
                   help="parameter-server ranks (bsp, ssp, asp, easgd); the weights are "
                        "sharded over them")
    p.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL,
                   metavar="SECONDS", help="how long servers and waiting workers (and avg:H "
                   "ranks that reach an average early) sleep between polls; 0: blocking MPI "
                   "waits, which busy-poll a core")
    p.add_argument("--compress", default="none", type=_compression, metavar="SPEC",
                   help=f"gradient compression for sync, bsp, ssp and asp: {SPEC_HELP}")
    p.add_argument("--error-feedback", default="auto", choices=("auto", "on", "off"),
                   help="carry what compression dropped into the next step (auto: on for "
                        "topk and sign)")
    p.add_argument("--straggler", action="append", default=[], type=_straggler,
                   metavar="RANK:FACTOR", help="make RANK sleep (FACTOR-1) x its compute time "
                   "after each step (repeatable)")
    p.add_argument("--jitter", type=float, default=0.0, metavar="SECONDS",
                   help="every worker sleeps an exponential delay of this mean after each "
                        "step (seeded by --seed and the rank)")
    p.add_argument("--allreduce", default="auto", choices=("auto",) + ALLREDUCE_ALGORITHMS)
    p.add_argument("--bucket-mb", type=float, default=4.0,
                   help="size of the fused gradient buffers (--dist sync)")
    p.add_argument("--no-overlap", action="store_true",
                   help="average gradients after backward instead of during it (--dist sync)")
    p.add_argument("--trace", action="store_true",  # perf: timeline
                   help="write a Chrome-trace timeline (trace.json) of the run to the run directory")


def _argument_type(parse):
    """An argparse type that keeps the text and turns ``parse``'s ValueError into a usage error."""
    def check(text):
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return check


_dist_mode = _argument_type(parse_dist_mode)
_compression = _argument_type(make_compressor)
_straggler = _argument_type(parse_straggler)


def _limit_threads(n):
    """Cap the BLAS thread pools; the returned controller must stay alive."""
    if n is None:
        return None
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=n)


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


def default_run_dir(args):
    return os.path.join("runs", f"{args.model}-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")


def mpiexec_ranks():
    """How many ranks mpiexec started (from the launcher's environment), 1 outside mpiexec."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def check_dist_options(args, mode):
    """Refuse options that do not apply to ``mode`` (None: no --dist), naming the fix."""
    what = f"--dist {mode.text}" if mode is not None else "a run without --dist"
    if args.servers != 1 and (mode is None or not mode.uses_server):
        raise SystemExit(f"minidl train: --servers applies to --dist bsp, ssp:S, asp and easgd, "
                         f"not to {what}")
    if args.servers > 1 and args.clip_grad_norm is not None:
        raise SystemExit("minidl train: --clip-grad-norm needs the whole gradient's norm, which "
                         "no shard server sees; use --servers 1")
    if args.compress != "none" and (mode is None or mode.name in ("avg", "easgd")):
        raise SystemExit(f"minidl train: --compress applies to --dist sync, bsp, ssp:S and asp, "
                         f"not to {what}")
    if args.error_feedback != "auto" and args.compress == "none":
        raise SystemExit("minidl train: --error-feedback needs --compress")
    if (args.straggler or args.jitter) and mode is None:
        raise SystemExit("minidl train: --straggler and --jitter slow down ranks of a --dist run")
    if args.trace and mode is not None and mode.name != "sync":
        raise SystemExit(f"minidl train: --trace records --dist sync or single-process runs, "
                         f"not {what}")
    if args.resume and mode is not None and mode.name != "sync":
        raise SystemExit(f"minidl train: --resume works with --dist sync or without --dist, "
                         f"not with {what}")


def _error_feedback(args):
    return {"auto": None, "on": True, "off": False}[args.error_feedback]


def make_straggler(args, comm, servers=0):
    """This rank's injected delays (None when there are none); checks the ranks named."""
    if not (args.straggler or args.jitter):
        return None
    for text in args.straggler:
        rank, _ = parse_straggler(text)
        if not servers <= rank < comm.size:
            raise SystemExit(f"minidl train: --straggler {text}: rank {rank} is not a worker; "
                             f"workers are ranks {servers}..{comm.size - 1}")
    return Straggler(comm.rank, args.straggler, args.jitter, seed=args.seed)


def _prepare_run_dir(args, out, size):
    """Rank 0's run directory with config.json; returns the paths of its files."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(vars(args) | {"world_size": size}, f, indent=2, default=str)
    return {name: os.path.join(out, name) for name in ("metrics.jsonl", "checkpoint.npz", "curves.png")}


def _report_epoch(paths, args, epoch, lr, stats, result, model, opt, scheduler):
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


def run_train(args):
    """Train as ``args`` says; returns 0, or 3 when the loss became NaN/inf."""
    if args.workers > 1:
        if args.dist or mpiexec_ranks() > 1:
            raise SystemExit("minidl train: --workers starts its own processes; under mpiexec "
                             "use --dist instead")
        return run_workers(args.argv, args.workers, args.batch_size, args.threads is not None)
    mode = parse_dist_mode(args.dist) if args.dist else None
    check_dist_options(args, mode)
    comm = None
    if args.dist:
        comm = dist.init()
    elif mpiexec_ranks() > 1:
        raise SystemExit(f"minidl train: started by mpiexec with {mpiexec_ranks()} ranks but "
                         "without --dist; add --dist sync to train one model together")
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    threads = args.threads
    if threads is None and size > 1 and size >= (os.cpu_count() or 1):
        threads = 1  # as many ranks as cores: more BLAS threads would only contend
    threads = _limit_threads(threads)  # noqa: F841  (kept alive for the run)
    md_random.manual_seed(args.seed)
    train_set, test_set = load_datasets(args)
    model = models.build(args.model, num_classes=len(train_set.classes),
                         in_channels=train_set.images.shape[1], conv_algo=args.conv_algo,
                         activation=args.activation)
    model.to(args.device)
    if mode is not None and mode.name != "sync":
        return train_with_session(args, mode, comm, model, train_set, test_set)
    straggler = make_straggler(args, comm) if comm is not None else None
    opt = make_optimizer(args, model.parameters())
    scheduler = make_scheduler(args, opt)
    start_epoch, out = 0, args.out
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        start_epoch = resume_from(ckpt, args, model, opt, scheduler)
        out = out or os.path.dirname(os.path.abspath(args.resume))
    out = out or default_run_dir(args)
    if comm is not None:
        opt = dist.DistributedOptimizer(opt, comm, allreduce=args.allreduce,
                                        bucket_mb=args.bucket_mb, overlap=not args.no_overlap,
                                        model=model, compression=args.compress,
                                        error_feedback=_error_feedback(args), seed=args.seed)
        out = comm.bcast_object(out)  # one run directory, named by rank 0
    transform = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()]) if args.augment else None
    train_loader = DataLoader(train_set, args.batch_size, shuffle=True, seed=args.seed,
                              drop_last=False, rank=rank, world_size=size, transform=transform)
    test_loader = DataLoader(test_set, args.test_batch_size, rank=rank, world_size=size)
    paths = _prepare_run_dir(args, out, size) if rank == 0 else None
    result = None
    if args.trace:  # perf: timeline of per-layer compute and the optimizer step, every rank
        from ..perf.training_trace import TrainingTrace
        tracing = TrainingTrace(model, opt, rank, args.device, comm=comm).start()
    for epoch in range(start_epoch + 1, args.epochs + 1):
        train_loader.set_epoch(epoch - 1)
        lr = opt.lr
        try:
            stats = train_epoch(model, opt, train_loader, epoch, args.device,
                                progress=rank == 0 and not args.no_progress, comm=comm,
                                straggler=straggler)
        except NonFiniteLossError as exc:
            if rank == 0:
                print(f"minidl train: {exc}", file=sys.stderr)
            return 3
        result = evaluate(model, test_loader, len(train_set.classes), args.device, comm=comm)
        if scheduler is not None:
            scheduler.step()
        if rank == 0:
            _report_epoch(paths, args, epoch, lr, stats, result, model, opt, scheduler)
            if args.compress != "none":
                append_metrics(paths["metrics.jsonl"], opt.compression_record(epoch))
    if args.trace:  # perf: every rank writes its part, rank 0 merges them
        trace_path = tracing.finish(out, comm)
        if rank == 0:
            print(f"timeline: {trace_path} (open it in https://ui.perfetto.dev)")
    if rank == 0:
        if result is not None:
            print(f"test accuracy {100 * result['acc']:.2f}% after epoch {args.epochs}; "
                  f"run directory: {out}")
        else:
            print(f"nothing to do: the checkpoint is already at epoch {start_epoch}; "
                  f"raise --epochs to train further")
    return 0


def train_with_session(args, mode, comm, model, train_set, test_set):
    """bsp / ssp:S / asp / avg:H / easgd: every rank runs its role in a consistency session.

    Rank 0 writes the outputs: per epoch an ``"epoch"`` record (global training
    loss and accuracy over the workers, test metrics of the consensus model:
    the servers' weights, the EASGD center or the replicas' average) and a
    ``"dist"`` record (staleness, waiting, throughput, bytes: see
    ``minidl.dist.telemetry``); the checkpoint holds the consensus model.
    """
    session = make_session(mode, comm, model, lambda params: make_optimizer(args, params),
                           servers=args.servers, compression=args.compress,
                           error_feedback=_error_feedback(args), poll_interval=args.poll_interval,
                           seed=args.seed, allreduce=args.allreduce)
    servers = session.layout.servers if mode.uses_server else 0
    straggler = make_straggler(args, comm, servers)
    scheduler = make_scheduler(args, session.schedulable) if session.schedulable else None
    out = comm.bcast_object(args.out or default_run_dir(args))
    transform = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()]) if args.augment else None
    train_loader = session.train_loader(train_set, args.batch_size, args.seed, transform)
    test_loader = DataLoader(test_set, args.test_batch_size, rank=comm.rank, world_size=comm.size)
    paths = _prepare_run_dir(args, out, comm.size) if comm.rank == 0 else None
    progress = comm.rank == servers and not args.no_progress
    for epoch in range(1, args.epochs + 1):
        train_loader.set_epoch(epoch - 1)
        lr = session.schedulable.lr if session.schedulable else None

        def train():
            try:
                return train_epoch(model, session.optimizer, train_loader, epoch, args.device,
                                   progress=progress, straggler=straggler)
            except NonFiniteLossError as exc:
                print(f"minidl train (rank {comm.rank}): {exc}", file=sys.stderr, flush=True)
                raise TrainingAborted(str(exc)) from exc

        stats, stopped = session.run_epoch(train)
        records = session.finish_epoch(stats, stopped, lr)
        if records is None:
            if comm.rank == 0:
                print("minidl train: training stopped: a worker's loss was not finite",
                      file=sys.stderr)
            session.close()
            return 3
        result = evaluate(model, test_loader, len(train_set.classes), args.device, comm=comm)
        if scheduler is not None:
            scheduler.step()
        if comm.rank == 0:
            stats = global_train_stats(records)
            lr = next(r["lr"] for r in records if r.get("lr") is not None)
            _report_epoch(paths, args, epoch, lr, stats, result, model, None, None)
            summary = {"epoch": epoch, **summarize_epoch(mode.text, records, stats["images"])}
            append_metrics(paths["metrics.jsonl"], summary)
            print(format_summary(summary), flush=True)
        session.restore_local()
    session.close()
    if comm.rank == 0:
        print(f"test accuracy {100 * result['acc']:.2f}% after epoch {args.epochs}; "
              f"run directory: {out}")
    return 0


def format_summary(summary):
    """One line of a ``"dist"`` record for the console."""
    line = (f"  {summary['mode']}: {summary['gradients_per_s']:.1f} gradients/s, "
            f"{summary['updates_per_s']:.1f} updates/s, "
            f"{summary['worker_bytes_sent'] / 2**20:.1f} MiB pushed")
    if "staleness" in summary:
        st = summary["staleness"]
        line += (f", staleness mean {st['mean']:.2f} max {st['max']}, gate wait "
                 + " ".join(f"{w:.1f}" for w in summary["gate_wait_s"]) + " s")
    return line + ", waiting " + " ".join(f"{w:.1f}" for w in summary["per_worker"]["wait_s"]) + " s"


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
