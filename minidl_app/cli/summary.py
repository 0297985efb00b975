"""``minidl summary``: per-layer shapes, parameters, FLOPs, memory, work and depth; then each
rank's bytes of parameters, gradients, optimizer state and activations on a grid."""

from minidl import optim
from minidl.dist.config import DistConfig
from minidl.dist.grid import GridShape
from minidl.dist.memory import format_memory, predict_memory
from minidl.layers import leaves, sqrt_segments
from minidl.models import MODELS
from minidl.perf.costs import CONVENTIONS
from minidl.perf.memory import STATE_ARRAYS, ZERO_STAGES
from minidl.perf.summary import format_summary, summarize
from minidl.perf.zoo import build_named
from minidl.train.config import TrainConfig

from . import add_model_arguments, positive_int
from .train import SQRT_SEGMENTS, add_layout_arguments, grid_shape


def add_summary_arguments(p):
    add_model_arguments(p)
    add = p.add_argument
    batch = "batch size the counts are for (per data-parallel replica)"
    add("--batch", "--batch-size", dest="batch", type=positive_int, default=1, help=batch)
    paper = "'paper' reproduces Ben-Nun & Hoefler's LeNet example (W=665,832, D=41)"
    add("--convention", default="corrected", choices=CONVENTIONS, help=paper)
    add("--optimizer", default="momentum", choices=list(optim.OPTIMIZERS), help="its state")
    add("--dtype", default="float32", choices=("float32", "float64"), help="of the weights")
    add(
        "--grid",
        type=grid_shape,
        metavar="AXIS=N,...",
        help=(
            "the ranks as a grid dp=D,pp=P,spatial=S,tp=T, as minidl train --grid: the memory"
            " table shows each rank's share"
        ),
    )
    add(
        "--zero",
        type=int,
        default=0,
        choices=ZERO_STAGES,
        metavar="STAGE",
        help=(
            "ZeRO stage over the data-parallel replicas (--grid dp=D, D >= 2): 1 shards the "
            "optimizer state, 2 the gradients too, 3 the parameters too"
        ),
    )
    add_layout_arguments(p.add_argument)


def run_summary(args):
    costs = summarize(args.model, args.input, args.batch, args.convention)
    print(format_summary(costs, title=args.model + ":"))
    model, shape = build_named(args.model, args.input)
    model = model.to(args.dtype)
    grid = GridShape.parse(args.grid) if args.grid else GridShape()
    recompute = sqrt_segments(len(model)) if args.recompute == SQRT_SEGMENTS else args.recompute
    check_layout(args, grid, recompute)
    if len(leaves(model)) != len(model):
        print(
            f"\nmemory per rank: not predicted for {args.model}, whose residual blocks nest "
            "layers (the memory model takes a Sequential of layers, none nested)"
        )
        return 0
    ranks = predict_memory(
        model,
        shape,
        args.batch,
        args.optimizer,
        grid,
        args.zero,
        recompute,
        args.micro_batches,
        args.schedule,
        args.chunks,
        args.stages,
        args.tp_layout,
    )
    k = STATE_ARRAYS[args.optimizer]
    print()
    print(
        f"memory per rank (MiB): {args.optimizer} keeps {k} state array(s) per parameter, "
        f"{args.dtype}, batch {args.batch}"
        + (f", grid {grid}" if args.grid else "")
        + (f", ZeRO stage {args.zero}" if args.zero else "")
        + (f", {recompute} recomputed segments" if recompute else "")
    )
    print(format_memory(ranks))
    if recompute or args.zero == 3:
        print(
            "activations: those held between forward and backward, plus the largest "
            "recomputed segment's while backward rebuilds it"
        )
    if grid.dp > 1 and not args.zero:
        print("not counted: the buckets data parallelism averages gradients in (P more bytes)")
    return 0


def check_layout(args, grid, recompute):
    """Refuse what ``minidl train`` would refuse of these options, and ZeRO without replicas."""
    if args.zero and grid.dp < 2:
        raise ValueError(
            f"--zero {args.zero} shards the optimizer state over data-parallel replicas: "
            "give --grid dp=D with D >= 2"
        )
    trained = args.model if args.model in MODELS else "alexnet"
    config = TrainConfig(model=trained, batch_size=args.batch, recompute=recompute)
    options = DistConfig(
        grid=grid if args.grid else None,
        zero=args.zero,
        micro_batches=args.micro_batches,
        schedule=args.schedule,
        chunks=args.chunks,
        stages=args.stages,
        tp_layout=args.tp_layout,
    )
    options.check(config)
