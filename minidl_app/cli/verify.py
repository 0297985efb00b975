"""``minidl verify``: K steps of a layout against one process, tensor by tensor.

It takes ``minidl train``'s flags (the layout's: ``--grid``, ``--dist sync``, ``--zero``,
``--sync-bn``, ``--micro-batches``...; the model's and the update rule's) and ``--steps``,
runs in float64, prints a line per tensor that differs and a last line naming the first
difference or saying none does. Exit status: 0 equal, 1 a difference or an error.
"""

from minidl.dist.job import mpiexec_rank

from . import positive_int
from .train import add_train_arguments, dist_config, train_config


def add_verify_arguments(p):
    add_train_arguments(p)
    p.add_argument("--steps", type=positive_int, default=3, help="steps compared (default 3)")


def run_verify(args):
    from minidl.dist.verify import verify

    if args.workers > 1 or args.resume:
        raise ValueError(
            "minidl verify compares the run from its initial weights under mpiexec: drop "
            "--workers and --resume (e.g. mpiexec -n 2 minidl verify --model lenet5)"
        )
    config, options = train_config(args), dist_config(args)
    verdict = verify(config.model, steps=args.steps, config=config, options=options)
    if mpiexec_rank() == 0:
        for difference in verdict.differences:
            print(difference)
        print(verdict.summary(), flush=True)
    return 0 if verdict.equal else 1
