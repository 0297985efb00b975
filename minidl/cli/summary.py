"""``minidl summary``: per-layer shapes, parameters, FLOPs, memory, work and depth."""

from ..perf.costs import CONVENTIONS
from ..perf.summary import format_summary, summarize
from . import add_model_arguments, positive_int


def add_summary_arguments(p):
    add_model_arguments(p)
    p.add_argument("--batch", type=positive_int, default=1, help="batch size the counts are for")
    paper = "'paper' reproduces Ben-Nun & Hoefler's LeNet example (W=665,832, D=41)"
    p.add_argument("--convention", default="corrected", choices=CONVENTIONS, help=paper)


def run_summary(args):
    costs = summarize(args.model, args.input, args.batch, args.convention)
    print(format_summary(costs, title=args.model + ":"))
    return 0
