"""``--resume``: continue a run from its checkpoint, with the options it was trained with.

Options not given on the command line are taken from the checkpoint's
configuration, so ``minidl train --resume RUN/checkpoint.npz --epochs 10``
continues the same run (where the data is and how ranks are launched and
slowed are this launch's own; compression and servers are restored only for a
``--dist`` run). Options given explicitly that differ from it are
either applied, with a line saying so (learning rate, momentum, weight decay,
clipping, schedule, epochs, batch size, the number of processes...), or, for
those that define what the run is (model, activation, dataset, optimizer,
subset, seed, dtype), refused with the fix. An applied ``--lr`` becomes the
schedule's base learning rate; the schedule continues from its epoch.
"""
import json

FIXED = ("model", "activation", "dataset", "optimizer", "subset", "seed", "dtype")
# how this launch runs, not what the run is: where the data is, how ranks are slowed...
NOT_RESTORED = ("out", "resume", "overwrite", "verbose", "no_progress", "threads", "workers",
                "device", "trace", "hang_timeout", "argv", "dist", "world_size", "data_dir",
                "verify_data", "straggler", "jitter")
# options of a --dist run: restored only when the resumed run has --dist too
DIST_ONLY = ("compress", "error_feedback", "servers")


class ResumeError(ValueError):
    """A resumed run asked to change what defines the run."""


def _flag(key):
    return "--" + key.replace("_", "-")


def _as_saved(value):
    """``value`` as it reads back from the JSON of a checkpoint's configuration."""
    return json.loads(json.dumps(value, default=str))


def reconcile(saved, args, given, world_size=1):
    """Make ``args`` continue the run of ``saved`` (its config); returns the notes on changes.

    ``given`` holds the option names (argparse dests) typed on the command
    line; ``world_size`` is the number of processes that will share each
    step. Raises ``ResumeError`` when one of them would change a ``FIXED`` option.
    """
    notes = []
    for key, old in saved.items():
        if key in NOT_RESTORED or not hasattr(args, key):
            continue
        if key in DIST_ONLY and getattr(args, "dist", None) is None:
            continue
        if key == "batch_size":
            notes += _batch_size(saved, args, key in given, world_size)
            continue
        new = getattr(args, key)
        if key not in given:
            setattr(args, key, old)
        elif _as_saved(new) != old:
            if key in FIXED:
                raise ResumeError(
                    f"--resume: the checkpoint was trained with {_flag(key)} {old}, this run asks "
                    f"for {new}; a run keeps its {key}: leave out {_flag(key)} to continue it, or "
                    "start a new run without --resume")
            notes.append(f"{_flag(key)} {new} (the checkpoint's run used {old})")
    return notes


def _batch_size(saved, args, given, world_size):
    """``--batch-size`` is per process: keep the samples per step when the process count changes."""
    per_step = saved["batch_size"] * saved.get("world_size", 1)
    if not given:
        if per_step % world_size:
            raise ResumeError(f"--resume: the checkpoint's run took {per_step} samples per step, "
                              f"which {world_size} processes cannot share equally; pass --batch-size")
        args.batch_size = per_step // world_size
        return []
    if args.batch_size * world_size == per_step:
        return []
    return [f"--batch-size {args.batch_size} x {world_size} processes: "
            f"{args.batch_size * world_size} samples per step (the checkpoint's run: {per_step})"]


def apply_changes(args, given, optimizer, scheduler):
    """After loading the checkpoint's optimizer state, apply the hyper-parameters given anew."""
    for key in ("momentum", "weight_decay"):
        if key in given and hasattr(optimizer, key):
            setattr(optimizer, key, getattr(args, key))
    if "lr" not in given:
        return
    if scheduler is None:
        optimizer.lr = args.lr
        return
    chained = scheduler
    while chained is not None:
        chained.base_lr = args.lr
        chained = getattr(chained, "then", None)
    optimizer.lr = scheduler.lr_at(scheduler.last_step)
