"""``--resume``: the options not typed anew come from the checkpoint's run.

``minidl train --resume RUN/checkpoint.npz --epochs 10`` continues the same
run: every option not given on the command line takes the value the
checkpoint's run used, except those of this launch (where the data is, how
ranks are started and slowed, ``--recompute``: the memory of this machine decides it;
compression and servers are restored only for a ``--dist`` run, micro-batches,
schedule and chunks only for a pipeline).
What may and may not change, and the notes on changes, are the library's
(``minidl_app.resume``).
"""

from minidl.dist.grid import GridShape

# how this launch runs, not what the run is
NOT_RESTORED = tuple(
    "out resume overwrite verbose no_progress progress threads workers device trace hang_timeout "
    "argv dist world_size data_dir verify_data straggler jitter grid recompute".split()
)
# options of a --dist run: restored only when the resumed run has --dist too
DIST_ONLY = ("compress", "error_feedback", "servers", "zero", "sync_bn")
# options of a pipeline: restored only when the resumed run has a pipeline (--grid ...,pp=P)
PIPELINE_ONLY = ("micro_batches", "schedule", "chunks", "stages")
# saved under the option's own name, typed as its negation
NEGATED = {"overlap": "no_overlap"}


def _pipelined(args):
    grid = getattr(args, "grid", None)
    return grid is not None and GridShape.parse(grid).pp > 1


def reconcile(saved, args, given, world_size=1):
    """Fill the options of ``args`` not in ``given`` from ``saved`` (the checkpoint's config).

    ``world_size``: the processes that will share each step's samples (a
    pipeline's replicas); the samples per step are kept when it changes and
    ``--batch-size`` is not given.
    """
    for key, old in saved.items():
        dest = NEGATED.get(key, key)
        if key in NOT_RESTORED or not hasattr(args, dest) or dest in given:
            continue
        if key in DIST_ONLY and getattr(args, "dist", None) is None:
            continue
        if key in PIPELINE_ONLY and not _pipelined(args):
            continue
        if key == "batch_size":
            per_step = saved["batch_size"] * saved.get("world_size", 1)
            if per_step % world_size:
                raise ValueError(
                    f"--resume: the checkpoint's run took {per_step} samples per step, which "
                    f"{world_size} processes cannot share equally; pass --batch-size"
                )
            args.batch_size = per_step // world_size
        else:
            setattr(args, dest, not old if key in NEGATED else old)
