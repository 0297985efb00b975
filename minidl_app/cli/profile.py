"""``minidl profile``: measured per-layer forward/backward time and memory of a training step."""

from minidl.backend import limit_threads
from minidl.perf.profile import format_profile, profile_model
from minidl.perf.zoo import build_named

from . import add_model_arguments, positive_int


def add_profile_arguments(p):
    add_model_arguments(p)
    add = p.add_argument
    add("--batch", type=positive_int, default=64)
    add("--steps", type=positive_int, default=5, help="profiled steps (medians are reported)")
    add("--warmup", type=int, default=2)
    add("--device", default="cpu", choices=("cpu", "cuda"))
    add("--conv-algo", default="auto")
    add("--no-memory", action="store_true", help="skip the tracemalloc pass")
    add("--by-type", action="store_true", help="one row per layer type")


def run_profile(args):
    threads = limit_threads(args.threads, blas=1)  # noqa: F841  (as train: kept while profiling)
    model, shape = build_named(args.model, args.input, conv_algo=args.conv_algo)
    model.to(args.device)
    profile = profile_model(
        model, shape, args.batch, args.steps, args.warmup, args.device, memory=not args.no_memory
    )
    print(format_profile(profile, title=f"{args.model}:", by_type=args.by_type))
    return 0
