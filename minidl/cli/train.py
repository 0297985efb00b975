"""``minidl train`` and ``minidl eval``: the command-line face of the training loop."""
import os
import sys

import numpy as np

from .. import dist, models, optim
from .. import random as md_random
from ..backend import limit_threads
from ..conv import ALGORITHMS as CONV_ALGORITHMS
from ..data import DataLoader
from ..dist import ALLREDUCE_ALGORITHMS
from ..dist.compression import SPEC_HELP
from ..dist.consistency import MODES_HELP, parse_dist_mode
from ..dist.ps_server import DEFAULT_POLL_INTERVAL
from ..train import distributed
from ..train.checkpoint import load_checkpoint
from ..train.loop import NonFiniteLossError, evaluate, train_epoch
from ..train.metrics import append_metrics
from ..train.setup import (DATASETS, SCHEDULES, augmentation, default_run_dir,
                    load_datasets, make_optimizer, make_scheduler, prepare_run_dir, report_epoch,
                    resume_from)
from ..train.workers import run_workers
from .common import positive_int


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
    p.add_argument("--dist", default=None, type=distributed.dist_mode, metavar="MODE",
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
    p.add_argument("--compress", default="none", type=distributed.compression, metavar="SPEC",
                   help=f"gradient compression for sync, bsp, ssp and asp: {SPEC_HELP}")
    p.add_argument("--error-feedback", default="auto", choices=("auto", "on", "off"),
                   help="carry what compression dropped into the next step (auto: on for "
                        "topk and sign)")
    p.add_argument("--straggler", action="append", default=[], type=distributed.straggler,
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


def run_train(args):
    """Train as ``args`` says; returns 0, or 3 when the loss became NaN/inf."""
    if args.workers > 1:
        if args.dist or distributed.mpiexec_ranks() > 1:
            raise SystemExit("minidl train: --workers starts its own processes; under mpiexec "
                             "use --dist instead")
        return run_workers(args.argv, args.workers, args.batch_size, args.threads is not None)
    mode = parse_dist_mode(args.dist) if args.dist else None
    distributed.check_dist_options(args, mode)
    comm = None
    if args.dist:
        comm = dist.init()
    elif distributed.mpiexec_ranks() > 1:
        raise SystemExit(f"minidl train: started by mpiexec with {distributed.mpiexec_ranks()} ranks but "
                         "without --dist; add --dist sync to train one model together")
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    threads = args.threads
    if threads is None and size > 1 and size >= (os.cpu_count() or 1):
        threads = 1  # as many ranks as cores: more BLAS threads would only contend
    threads = limit_threads(threads)  # noqa: F841  (kept alive for the run)
    md_random.manual_seed(args.seed)
    train_set, test_set = load_datasets(args)
    model = models.build(args.model, num_classes=len(train_set.classes),
                         in_channels=train_set.images.shape[1], conv_algo=args.conv_algo,
                         activation=args.activation)
    model.to(args.device)
    if mode is not None and mode.name != "sync":
        return distributed.train_with_session(args, mode, comm, model, train_set, test_set)
    straggler = distributed.make_straggler(args, comm) if comm is not None else None
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
                                        error_feedback=distributed.error_feedback(args), seed=args.seed)
        out = comm.bcast_object(out)  # one run directory, named by rank 0
    train_loader = DataLoader(train_set, args.batch_size, shuffle=True, seed=args.seed,
                              drop_last=False, rank=rank, world_size=size,
                              transform=augmentation(args))
    test_loader = DataLoader(test_set, args.test_batch_size, rank=rank, world_size=size)
    paths = prepare_run_dir(args, out, size) if rank == 0 else None
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
            report_epoch(paths, args, epoch, lr, stats, result, model, opt, scheduler)
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
