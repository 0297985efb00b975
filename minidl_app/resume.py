"""Resuming: continue a run from its checkpoint, checking that it is the same run.

The configuration passed with a checkpoint must describe the same run: the
options that define it (model, variant, crop size, activation, dataset, optimizer,
subset, seed, dtype) cannot change. Others may (learning rate, momentum, weight
decay, clipping, schedule, epochs, samples per step...): each change is
applied and announced. An applied learning rate becomes the schedule's base
rate; the schedule continues from its epoch. How a launch runs (``LAUNCH``:
folders, threads, device, ranks, recomputed segments...) changes unannounced:
recomputation trades memory for time, not results.
(The command line first takes every option not typed anew from the checkpoint:
see ``minidl_app.cli.resume``.)
"""

import json

from minidl.train.config import ConfigError, option

# what defines the run; variant and crop size give the model its shapes
FIXED = (
    "model",
    "variant",
    "crop_size",
    "activation",
    "dataset",
    "optimizer",
    "subset",
    "seed",
    "dtype",
)
# how this launch runs, not what the run is: not announced when they differ
LAUNCH = tuple(
    "out overwrite progress threads device trace data_dir verify_data hang_timeout straggler "
    "jitter world_size batch_size dist grid recompute".split()
)


class ResumeError(ConfigError):
    """A resumed run asked to change what defines the run."""


def as_saved(value):
    """``value`` as it reads back from the JSON of a checkpoint's configuration."""
    return json.loads(json.dumps(value, default=str))


def check_fixed(saved, record):
    """Raise ``ResumeError`` when ``record`` (this run's options) changes one of ``FIXED``."""
    for key in FIXED:
        if key in saved and key in record and as_saved(record[key]) != saved[key]:
            raise ResumeError(
                f"{option('resume')}: the checkpoint was trained with {option(key)} {saved[key]}, "
                f"this run asks for {record[key]}; a run keeps its {key}: leave out "
                f"{option(key)} to continue it, or start a new run without {option('resume')}"
            )


def changes(saved, record):
    """The options of ``record`` (this run's) that differ from ``saved`` (the checkpoint's).

    Returns the changed option names and one note per change (``--lr 0.05
    (the checkpoint's run used 0.01)``); ``check_fixed`` has refused changes
    of what defines the run.
    """
    changed, notes = [], []
    for key, new in record.items():
        if key in FIXED or key in LAUNCH or key not in saved or as_saved(new) == saved[key]:
            continue
        changed.append(key)
        notes.append(f"{option(key)} {new} (the checkpoint's run used {saved[key]})")
    if layout(record) != layout(saved):
        notes.append(
            f"{layout(record)} (the checkpoint's run: {layout(saved)}); the checkpoint is the "
            "serial model, placed anew"
        )
    per_step = record["batch_size"] * record["world_size"]
    saved_per_step = saved["batch_size"] * saved.get("world_size", 1)
    if per_step != saved_per_step:
        notes.append(
            f"{option('batch_size')} {record['batch_size']} x {record['world_size']} processes: "
            f"{per_step} samples per step (the checkpoint's run: {saved_per_step})"
        )
    elif record["batch_size"] != saved["batch_size"]:
        notes.append(
            f"{option('batch_size')} {record['batch_size']} per process (the checkpoint's run: "
            f"{saved['batch_size']}): {per_step} samples per step, as before"
        )
    return changed, notes


def layout(config):
    """How ``config`` (a run's saved options) places the model, as its flags say it."""
    if config.get("grid"):
        return f"{option('grid')} {config['grid']}"
    if config.get("dist"):
        return f"{option('dist')} {config['dist']} on {config.get('world_size', 1)} processes"
    return "one process"


def apply_changes(config, changed, optimizer, scheduler):
    """After loading the checkpoint's optimizer state, apply the hyper-parameters changed."""
    for key in ("momentum", "weight_decay"):
        if key in changed and hasattr(optimizer, key):
            setattr(optimizer, key, getattr(config, key))
    if "lr" not in changed:
        return
    if scheduler is None or not hasattr(scheduler, "lr_at"):  # none, or a plateau's own lr
        optimizer.lr = config.lr
        return
    chained = scheduler
    while chained is not None:
        chained.base_lr = config.lr
        chained = getattr(chained, "then", None)
    optimizer.lr = scheduler.lr_at(scheduler.last_step)
