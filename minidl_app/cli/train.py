"""``minidl train`` and ``minidl eval``: the command-line face of the training loop.

Exit status: 0 when the run finished, 1 for an error (one line; ``--verbose``
shows the traceback), 2 for a bad flag, 3 when training diverged (the last
good checkpoint is kept).
"""

import argparse
import sys

import numpy as np

from minidl import models, optim
from minidl.conv import ALGORITHMS as CONV_ALGORITHMS
from minidl.data import DataLoader
from minidl.dist import ALLREDUCE_ALGORITHMS
from minidl.dist.config import STAGE_CUTS, TP_LAYOUTS, DistConfig, DistMode
from minidl.dist.consistency.server import DEFAULT_POLL_INTERVAL
from minidl.dist.grid import GridShape
from minidl.dist.job import mpiexec_rank, mpiexec_ranks
from minidl.dist.pipeline import SCHEDULES as PIPELINE_SCHEDULES
from minidl.layers import sqrt_segments
from minidl.train import Diverged, TrainConfig
from minidl.train.checkpoint import load_checkpoint
from minidl.train.config import DATASETS, INITS, RECIPES, SCHEDULES, build_model, load_split
from minidl.train.loop import evaluate
from minidl_app.launch import run_workers, share_batch, worker_command

from ..run import dist_fit, fit
from . import argument_type, error_text, flag, nonnegative_int, number, positive_int
from .resume import reconcile
from .specs import SPEC_HELP, parse_compression

DIVERGED_EXIT = 3
SQRT_SEGMENTS = -1  # --recompute without N (no value typed can be negative)
MODES_HELP = "sync, bsp, ssp:S, asp, avg:H or easgd[:ALPHA[:TAU]]"


def _field(text, value, kind, what):
    try:
        return kind(value)
    except ValueError:
        raise ValueError(
            f"--dist {text!r}: {what} must be a number, got {value!r}; use {MODES_HELP}"
        ) from None


def parse_dist_mode(text):
    """``--dist`` text -> ``DistMode``; errors list the modes."""
    name, *fields = str(text).split(":")
    if name in ("sync", "asp", "bsp") and not fields:
        return DistMode(name)
    if name == "ssp" and len(fields) == 1:
        staleness = _field(text, fields[0], int, "S")
        if staleness < 0:
            raise ValueError(f"--dist {text!r}: the staleness bound S must be >= 0")
        return DistMode("ssp", staleness=staleness)
    if name == "avg" and len(fields) == 1:
        period = _field(text, fields[0], int, "H")
        if period < 1:
            raise ValueError(f"--dist {text!r}: the averaging period H must be >= 1")
        return DistMode("avg", period=period)
    if name == "easgd" and len(fields) <= 2:
        alpha = _field(text, fields[0], float, "ALPHA") if fields and fields[0] else None
        period = _field(text, fields[1], int, "TAU") if len(fields) > 1 else None
        if alpha is not None and not 0 < alpha < 1:
            raise ValueError(f"--dist {text!r}: ALPHA must be in (0, 1)")
        if period is not None and period < 1:
            raise ValueError(f"--dist {text!r}: TAU must be >= 1")
        return DistMode("easgd", period=period, alpha=alpha)
    raise ValueError(f"unknown --dist {text!r}; use {MODES_HELP}")


def parse_straggler(text):
    """``"RANK:FACTOR"`` -> (rank, factor); FACTOR a finite number >= 1."""
    try:
        rank, factor = text.split(":")
        rank, factor = int(rank), float(factor)
    except ValueError:
        raise ValueError(
            f"--straggler {text!r}: expected RANK:FACTOR, e.g. 1:2 (rank 1 runs two times slower)"
        ) from None
    if rank < 0 or not 1 <= factor < float("inf"):
        raise ValueError(f"--straggler {text!r}: RANK must be >= 0 and FACTOR a number >= 1")
    return rank, factor


dist_mode = argument_type(parse_dist_mode, keep_text=True)
compression = argument_type(lambda text: text == "none" or parse_compression(text), keep_text=True)
straggler = argument_type(parse_straggler, keep_text=True)
grid_shape = argument_type(GridShape.parse, keep_text=True)


def add_data_arguments(add):
    """--data-dir, --no-verify-data and the image folder's evaluation options, shared by train
    and eval."""
    add(
        "--data-dir",
        help="the folder with the IDX files (the only one looked in when given); --dataset "
        "folder: the folder holding train/ and val/",
    )
    add(
        "--no-verify-data",
        dest="verify_data",
        action="store_false",
        help="skip the SHA-256 check that the files are the dataset's published ones (for "
        "files prepared on purpose)",
    )
    add(
        "--ten-crop",
        action="store_true",
        help="--dataset folder: evaluate on ten crops (corners, centre, mirrored), softmax "
        "averaged",
    )
    add(
        "--data-workers",
        type=nonnegative_int,
        default=2,
        help="--dataset folder: threads decoding images (0: in the training thread)",
    )
    add(
        "--skip-unreadable",
        action="store_true",
        help="--dataset folder: leave out images that cannot be decoded, and count them "
        "(default: stop, naming the file)",
    )


def add_layout_arguments(add):
    """How a layout cuts the model and its memory: shared by train and summary."""
    add(
        "--tp-layout",
        default="rule",
        choices=TP_LAYOUTS,
        help="with --grid ...,tp=T: how layers are split: rule (Megatron's pairs, every layer "
        "split) or one-weird-trick (convolutions data-parallel, fully connected layers split)",
    )
    add(
        "--recompute",
        type=nonnegative_int,
        nargs="?",
        const=SQRT_SEGMENTS,
        metavar="N",
        help="keep only the inputs of N segments of the model's layers between forward and "
        "backward, recomputing each segment in backward (Chen et al. 2016: O(sqrt(layers)) "
        "activations held for one more forward); without N: round(sqrt(layers)); 0: none",
    )
    add(
        "--micro-batches",
        type=positive_int,
        default=1,
        metavar="M",
        help="with --grid ...,pp=P: cut each batch into M micro-batches that fill the pipeline "
        "(bubble (P-1)/(M+P-1))",
    )
    add(
        "--schedule",
        default="1f1b",
        choices=list(PIPELINE_SCHEDULES),
        help="with --grid ...,pp=P: the pipeline schedule (naive: one micro-batch at a time; "
        "gpipe: all forwards, then all backwards; 1f1b: one forward, one backward; "
        "interleaved: 1f1b over --chunks model chunks per rank, M a multiple of P)",
    )
    add(
        "--chunks",
        type=positive_int,
        metavar="V",
        help="with --schedule interleaved: model chunks per pipeline rank (default 2)",
    )
    add(
        "--stages",
        default="memory",
        choices=STAGE_CUTS,
        help="with --grid ...,pp=P: cut the model into stages whose largest holds the fewest "
        "bytes of weights, gradients, optimizer state and in-flight activations (memory), the "
        "same number of layers each (layers), or the fewest parameters (parameters)",
    )


def add_train_arguments(p):
    """``minidl train``'s options, in groups by concern."""
    add = p.add_argument_group("run").add_argument
    add(
        "--out",
        help="run directory (default runs/MODEL-DATASET-TIME); a folder holding a run is "
        "refused unless --overwrite",
    )
    add(
        "--overwrite",
        action="store_true",
        help="replace the run in --out (its files are deleted first)",
    )
    add(
        "--resume",
        metavar="CKPT",
        help="continue from a checkpoint.npz up to --epochs, with the options it was trained "
        "with unless given anew, in its run's folder (a copied checkpoint: --out)",
    )
    add("--seed", type=int, default=0)
    add(
        "--deterministic",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="the same seed gives the same bits: convolution and allreduce 'auto' pick by a "
        "fixed rule (--no-deterministic: by timing, which is faster on some machines and may "
        "differ between runs)",
    )
    add("--device", default="cpu", choices=("cpu", "cuda"))
    add(
        "--threads",
        type=positive_int,
        help="minidl's threads per process, BLAS on one (default: the host's cores shared "
        "among its ranks, timed against 1)",
    )
    add(
        "--workers",
        type=positive_int,
        default=1,
        help="data-parallel processes on this machine (needs the mpi extra); --batch-size "
        "stays the samples per step",
    )
    add("--no-progress", action="store_true", help="no progress bar")

    add = p.add_argument_group("model and data").add_argument
    add("--model", default="lenet5", choices=list(models.MODELS))
    add("--activation", default="relu", choices=list(models.ACTIVATIONS))
    add(
        "--variant",
        choices=("original", "torchvision"),
        help="alexnet: original (2012 paper, two towers, LRN, 227x227 crops) or torchvision "
        "(one tower, 224x224)",
    )
    add(
        "--init",
        default="default",
        choices=INITS,
        help="paper: weights N(0, 0.01), biases 1 in conv2, conv4, conv5, fc6, fc7 (alexnet)",
    )
    add(
        "--dropout",
        type=number(),
        help="alexnet: the classifier's dropout probability (default: 0.5; 0: none)",
    )
    add(
        "--dtype",
        default="float32",
        choices=("float32", "float64"),
        help="of the weights and the arithmetic (float64: exact comparisons)",
    )
    add("--conv-algo", default="auto", choices=("auto",) + tuple(CONV_ALGORITHMS))
    add("--dataset", default="fashion-mnist", choices=list(DATASETS))
    add("--subset", type=positive_int, help="train on the first N training images only")
    add("--test-subset", type=positive_int, help="evaluate on the first N test images only")
    add("--test-batch-size", type=positive_int, default=1000)
    add("--augment", action="store_true", help="random crop (pad 2) and flips")
    add_data_arguments(add)
    add(
        "--crop-size",
        type=positive_int,
        help="--dataset folder: crop side (default: the variant's 227 or 224)",
    )
    add(
        "--resize",
        type=positive_int,
        default=256,
        help="--dataset folder: shorter side and central patch before cropping",
    )
    add(
        "--pca-std",
        type=number(),
        default=0.1,
        help="--dataset folder: colour augmentation alpha ~ N(0, PCA_STD); 0 turns it off",
    )

    add = p.add_argument_group("optimisation").add_argument
    add("--epochs", type=positive_int, default=3)
    add("--batch-size", type=positive_int, default=64, help="samples per step per process")
    add("--optimizer", default="momentum", choices=list(optim.OPTIMIZERS))
    add("--lr", type=number(positive=True), default=0.01)
    add("--momentum", type=number(), default=0.9, help="for momentum and nesterov")
    add("--weight-decay", type=number(), default=0.0)
    add("--clip-grad-norm", type=number(positive=True))
    add(
        "--lr-schedule",
        default="constant",
        choices=SCHEDULES,
        help="step: x0.1 every third of the epochs; cosine: down to 0 at the end",
    )
    add("--warmup-epochs", type=nonnegative_int, default=0)

    add = p.add_argument_group("distribution and grid").add_argument
    add(
        "--dist",
        type=dist_mode,
        metavar="MODE",
        help=f"{MODES_HELP} (start under mpiexec). sync: gradients averaged by allreduce; "
        "bsp/ssp:S/asp: parameter server on ranks 0..K-1, workers on the rest; avg:H: weights "
        "averaged every H steps; easgd: elastic averaging with a center on the server. The "
        "batch size is per worker",
    )
    add(
        "--grid",
        type=grid_shape,
        metavar="AXIS=N,...",
        help="under mpiexec, arrange the ranks as a grid dp=D,pp=P,spatial=S,tp=T (omitted "
        "axes are 1; the product is the rank count): data, pipeline, spatial and tensor "
        "parallelism. --grid dp=N is --dist sync on N ranks; --batch-size is per "
        "data-parallel replica",
    )
    add(
        "--servers",
        type=positive_int,
        default=1,
        help="parameter-server ranks (bsp, ssp, asp, easgd); the weights are sharded over them",
    )
    add(
        "--poll-interval",
        type=number(),
        default=DEFAULT_POLL_INTERVAL,
        metavar="SECONDS",
        help="how long servers and waiting workers (and avg:H ranks that reach an average "
        "early) sleep between polls; 0: blocking MPI waits, which busy-poll a core",
    )
    add(
        "--compress",
        default="none",
        type=compression,
        metavar="SPEC",
        help=f"gradient compression for sync, bsp, ssp and asp: {SPEC_HELP}",
    )
    add(
        "--error-feedback",
        default="auto",
        choices=("auto", "on", "off"),
        help="carry what compression dropped into the next step (auto: on for topk and sign)",
    )
    add("--allreduce", default="auto", choices=("auto",) + ALLREDUCE_ALGORITHMS)
    add(
        "--bucket-mb",
        type=number(positive=True),
        default=4.0,
        help="size of the fused gradient buffers (--dist sync)",
    )
    add(
        "--no-overlap",
        action="store_true",
        help="average gradients after backward instead of during it (--dist sync)",
    )
    add(
        "--zero",
        type=int,
        default=0,
        choices=(0, 1, 2, 3),
        metavar="STAGE",
        help="with --dist sync (or the dp axis of --grid): ZeRO stage 1 shards the optimizer "
        "state over the replicas, stage 2 the gradients too, stage 3 the weights too, "
        "gathering each layer's when it runs (one more forward of it a step; 0: none)",
    )
    add(
        "--sync-bn",
        action="store_true",
        help="with --dist sync (or the dp axis of --grid): batch-norm layers normalise with "
        "the mean and variance of the whole batch of all replicas, as one process with it "
        "does (without it: each rank's own share's)",
    )
    add(
        "--hang-timeout",
        type=number(),
        default=300.0,
        metavar="SECONDS",
        help="under MPI, abort the job when a rank makes no progress for this long (a stopped "
        "or deadlocked rank); 0: never",
    )

    add_layout_arguments(p.add_argument_group("layout and pipeline").add_argument)

    p.add_argument_group("recipe").add_argument(
        "--recipe",
        choices=list(RECIPES),
        help="a published training recipe; options given anew override it. alexnet-2012: "
        "--model alexnet, momentum 0.9, --weight-decay 5e-4, --batch-size 128, --lr 0.01 "
        "divided by 10 when the validation error stops improving (--lr-schedule plateau), "
        "--init paper, 90 epochs, --test-batch-size 128",
    )

    add = p.add_argument_group("diagnostics").add_argument
    add(
        "--trace",
        action="store_true",
        help="write a Chrome-trace timeline (trace.json) of the run to the run directory",
    )
    add(
        "--straggler",
        action="append",
        default=[],
        type=straggler,
        metavar="RANK:FACTOR",
        help="make RANK sleep (FACTOR-1) x its compute time after each step (repeatable)",
    )
    add(
        "--jitter",
        type=number(),
        default=0.0,
        metavar="SECONDS",
        help="every worker sleeps an exponential delay of this mean after each step (seeded "
        "by --seed and the rank)",
    )


def given_options(argv):
    """The option names (argparse dests) that ``argv`` types: parsed with every default None,
    the ones that hold a value (no typed option parses to None)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_train_arguments(parser)
    parser.set_defaults(**dict.fromkeys(vars(parser.parse_args([])), None))
    parsed = vars(parser.parse_known_args(argv)[0])
    return frozenset(name for name, value in parsed.items() if value is not None)


def apply_recipe(args):
    """Set the options of ``--recipe`` that the command line does not give itself."""
    if args.recipe:
        given = given_options(args.argv)
        for key, value in RECIPES[args.recipe].items():
            if key not in given:
                setattr(args, key, value)


def train_config(args):
    """The ``TrainConfig`` of the parsed flags."""
    fields = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__}
    return TrainConfig(**fields, progress=not args.no_progress)


def dist_config(args):
    """The ``DistConfig`` of the parsed flags (``--dist`` absent: sync)."""
    return DistConfig(
        mode=parse_dist_mode(args.dist or "sync"),
        allreduce=args.allreduce,
        bucket_mb=args.bucket_mb,
        overlap=not args.no_overlap,
        servers=args.servers,
        poll_interval=args.poll_interval,
        compressor=None if args.compress == "none" else parse_compression(args.compress),
        error_feedback={"auto": None, "on": True, "off": False}[args.error_feedback],
        stragglers=dict(parse_straggler(text) for text in args.straggler),
        jitter=args.jitter,
        hang_timeout=args.hang_timeout,
        tp_layout=args.tp_layout,
        grid=GridShape.parse(args.grid) if args.grid else None,
        micro_batches=args.micro_batches,
        schedule=args.schedule,
        chunks=args.chunks,
        stages=args.stages,
        zero=args.zero,
        sync_bn=args.sync_bn,
    )


def run_train(args):
    """Train as ``args`` says; returns 0, or 3 when the loss became NaN/inf."""
    ranks = mpiexec_ranks()
    apply_recipe(args)
    saved = {}
    if args.resume:
        saved = load_checkpoint(args.resume).training_config()
        # with --workers, --batch-size here is the whole step's (the workers split it)
        world = 1 if args.workers > 1 else ranks
        if args.grid:  # the replicas share a step's samples; the other axes share the model
            world = GridShape.parse(args.grid).dp
        reconcile(saved, args, given_options(args.argv), world)
    if args.recompute == SQRT_SEGMENTS:
        args.recompute = sqrt_segments_of(args)
    if args.workers > 1 and (args.dist or ranks > 1):
        raise ValueError("--workers starts its own processes; under mpiexec use --dist instead")
    if args.grid and args.dist and args.dist != "sync":
        raise ValueError(
            f"--grid arranges ranks for synchronous training; it cannot run with --dist "
            f"{args.dist} (drop one of them)"
        )
    if args.grid and args.workers > 1:
        raise ValueError("--grid arranges the ranks of an mpiexec job; use it without --workers")
    if args.resume and saved.get("grid") and not (args.dist or args.grid) and ranks > 1:
        raise ValueError(
            f"--resume: the checkpoint's run trained on --grid {saved['grid']}; add --grid "
            f"{saved['grid']} to continue it on its grid (or --dist sync to continue it as data "
            "parallelism)"
        )
    if not args.dist and not args.grid and ranks > 1:
        raise ValueError(
            f"started by mpiexec with {ranks} ranks but without --dist; add --dist sync to train "
            "one model together"
        )
    if args.zero and not (args.dist or args.grid):
        raise ValueError("--zero shards the replicas of --dist sync: start it under mpiexec")
    if args.sync_bn and not (args.dist or args.grid):
        raise ValueError(
            "--sync-bn joins the batch statistics of --dist sync's replicas: start it under "
            "mpiexec with --dist sync"
        )
    if (args.straggler or args.jitter) and not args.dist:
        raise ValueError("--straggler and --jitter slow down ranks of a --dist run")
    config, options = train_config(args), dist_config(args)
    try:
        if args.dist or args.grid:
            dist_fit(config, options, args.resume, option=flag)  # it checks both
        elif args.workers > 1:
            options.check(config.check(), args.resume)
            return relaunch(args.argv, share_batch(config, args.workers), args.workers)
        else:
            options.check(config, args.resume)  # refuses what needs ranks; fit checks config
            fit(config, args.resume, option=flag)
    except Diverged as exc:
        if mpiexec_rank() == 0:
            print(f"minidl train: {error_text(exc)}", file=sys.stderr, flush=True)
        return DIVERGED_EXIT
    return 0


def sqrt_segments_of(args):
    """N = round(sqrt(L)) for ``--recompute`` without N, L the layers of the model the flags
    name (built once to count them)."""
    variant = {"variant": args.variant} if args.model == "alexnet" and args.variant else {}
    model = models.build(args.model, activation=args.activation, **variant)
    return sqrt_segments(len(model))


def relaunch(argv, config, workers):
    """Run ``minidl train argv`` on ``workers`` local ranks as ``--dist sync`` with ``config``'s
    share of the batch and threads; returns the job's exit status."""
    rest = _without(_without(argv, "--workers"), "--batch-size")
    rest = _without(rest, "--threads")
    extra = ["--dist", "sync", "--batch-size", str(config.batch_size)]
    extra += ["--threads", str(config.threads)]
    return run_workers(*worker_command(["-m", "minidl", "train", *rest, *extra], workers))


def _without(argv, flag):
    """``argv`` without ``flag VALUE`` or ``flag=VALUE``."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == flag:
            skip = True
        elif not item.startswith(flag + "="):
            out.append(item)
    return out


def add_eval_arguments(p):
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz from minidl train")
    add_data_arguments(p.add_argument)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-size", type=positive_int, default=1000)


def run_eval(args):
    """Print the test accuracy and the confusion matrix of a checkpoint."""
    ckpt = load_checkpoint(args.checkpoint)
    config = ckpt.training_config()
    given = ("device", "verify_data", "ten_crop", "data_workers", "skip_unreadable")
    options = {name: getattr(args, name) for name in given}
    if args.data_dir or config["dataset"] != "folder":
        options["data_dir"] = args.data_dir
    run_config = TrainConfig.from_record(config).replace(**options)
    test_set = load_split(run_config, False)
    model = build_model(run_config.replace(init="default"), test_set)
    model.load_state_dict(ckpt.model_state)
    loader = DataLoader(
        test_set, args.batch_size, workers=args.data_workers, skip_unreadable=args.skip_unreadable
    )
    result = evaluate(model, loader, len(test_set.classes), args.device)
    print(
        f"{config['model']} on {config['dataset']} (epoch {ckpt.meta['epoch']}): "
        f"test accuracy {100 * result['acc']:.2f}% over {result['images']} images; top-1 "
        f"error {100 * (1 - result['acc']):.2f}%, top-5 error {100 * (1 - result['top5_acc']):.2f}%"
    )
    if loader.skipped:
        print(f"{len(loader.skipped)} unreadable images left out, e.g. {loader.skipped[0]}")
    print(format_confusion(result["confusion"], test_set.classes))
    return 0


def format_confusion(confusion, classes):
    """The confusion matrix as text: rows are true classes, columns predictions."""
    width = max(6, len(str(confusion.max())) + 1)
    names = [c[:12] for c in classes]
    label_w = max(len(n) for n in names) + 1
    head = " " * label_w + "".join(f"{i:>{width}}" for i in range(len(names)))
    rows = [
        f"{n:<{label_w}}" + "".join(f"{v:>{width}}" for v in row) + f"   {i}"
        for i, (n, row) in enumerate(zip(names, confusion))
    ]
    recall = np.diag(confusion) / np.maximum(confusion.sum(axis=1), 1)
    rows.append("per-class accuracy: " + ", ".join(f"{100 * r:.1f}" for r in recall))
    return "\n".join(["confusion matrix (rows: true class, columns: predicted)", head] + rows)
