"""Checkpoints: model, optimizer state, epoch and RNG state in one ``.npz`` file.

A checkpoint is data, never code: read with ``allow_pickle=False``, its metadata (epoch,
configuration, RNG state) one JSON string. It is written atomically (``minidl.atomic``),
so a crash or a full disk mid-write leaves the previous one intact. A damaged file,
missing metadata, or weights holding NaN or inf (a diverged run) raise errors that name
the file and the fix.
"""

import json
import os
import zipfile

import numpy as np

from ..atomic import atomic_write
from ..backend import to_numpy


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read or does not fit the model."""


def save_checkpoint(path, model, optimizer=None, **meta):
    """Write ``model``'s and ``optimizer``'s state plus JSON-able ``meta`` to ``path`` atomically.

    ``model``: a model, or its state as (name, array) pairs; ``optimizer``: an optimizer, or a
    state dict whose ``"state"`` may be an iterable of per-parameter dicts. Pairs and states are
    written one by one as they come (a layout gathers them layer by layer: ``minidl.dist``), so
    no more than one of them needs to be held here at a time."""
    items = model.state_dict().items() if hasattr(model, "state_dict") else model
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_write(path) as handle, zipfile.ZipFile(handle, "w", allowZip64=True) as archive:
        for name, value in items:
            _write(archive, f"model/{name}", to_numpy(value))
        if optimizer is not None:
            state = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
            for name, value in state["hyper"].items():
                _write(archive, f"optim/hyper/{name}", np.asarray(value))
            count = 0
            for count, per_param in enumerate(state["state"], 1):
                for name, value in per_param.items():
                    _write(archive, f"optim/state/{count - 1}/{name}", to_numpy(value))
            meta["optimizer_params"] = count
        _write(archive, "meta", np.array(json.dumps(meta)))
    return path


def _write(archive, key, array):
    """``array`` as the ``.npy`` member ``key`` of ``archive`` (what ``np.load`` reads)."""
    with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
        np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)


class Checkpoint:
    """What ``load_checkpoint`` returns: ``model_state``, ``optimizer_state`` or None, ``meta``."""

    def __init__(self, model_state, optimizer_state, meta, path=None):
        self.model_state, self.optimizer_state, self.meta = model_state, optimizer_state, meta
        self.path = path

    def training_config(self):
        """The ``minidl train`` options of the run; a ``CheckpointError`` naming what is missing
        when the file was not written by ``minidl train`` (resume and eval need them)."""
        config = self.meta.get("config")
        missing = [key for key in ("epoch", "rng", "config") if key not in self.meta]
        if isinstance(config, dict):
            missing += [f"config.{key}" for key in ("model", "dataset") if key not in config]
        elif "config" not in missing:
            missing.append("config")
        if missing:
            raise CheckpointError(
                f"checkpoint {self.path!r} lacks {', '.join(missing)}: it was "
                "not written by 'minidl train'; resume or evaluate a checkpoint "
                "of a minidl train run, or load this one with load_checkpoint "
                "in your own code"
            )
        return config


def _python(value):
    return value.item() if value.ndim == 0 else value


def load_checkpoint(path):
    """Read a checkpoint written by ``save_checkpoint``; errors name the file and the defect."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"checkpoint {path!r} does not exist; pass the path of a "
            "checkpoint.npz written by 'minidl train' (in its --out folder)"
        )
    try:
        with np.load(path, allow_pickle=False) as z:
            items = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CheckpointError(
            f"checkpoint {path!r} is corrupt or not a minidl checkpoint "
            f"({exc}); use an earlier checkpoint or retrain"
        ) from None
    if "meta" not in items:
        raise CheckpointError(f"checkpoint {path!r} has no metadata; it was not written by minidl")
    try:
        meta = json.loads(str(items.pop("meta")))
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"checkpoint {path!r}: its metadata is damaged ({exc}); use an "
            "earlier checkpoint or retrain"
        ) from None
    _check_values(path, meta, items)
    model = {k[len("model/") :]: v for k, v in items.items() if k.startswith("model/")}
    optimizer = None
    if "optimizer_params" in meta:
        hyper = {
            k.split("/", 2)[2]: _python(v) for k, v in items.items() if k.startswith("optim/hyper/")
        }
        state = [{} for _ in range(meta["optimizer_params"])]
        for k, v in items.items():
            if k.startswith("optim/state/"):
                _, _, index, name = k.split("/", 3)
                state[int(index)][name] = _python(v)
        optimizer = {"hyper": hyper, "state": state}
    return Checkpoint(model, optimizer, meta, path)


def _check_values(path, meta, items):
    """Refuse metadata of the wrong kind and weights or state that hold NaN or inf."""
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"checkpoint {path!r}: its metadata is not a JSON object; it was not written by minidl"
        )
    epoch = meta.get("epoch", 0)
    if not isinstance(epoch, int) or epoch < 0:
        raise CheckpointError(f"checkpoint {path!r}: epoch {epoch!r} is not a count of epochs")
    for key, value in items.items():
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise CheckpointError(
                f"checkpoint {path!r}: {key} holds NaN or inf, so the run had "
                "diverged when it was saved; resume from an earlier checkpoint "
                "or retrain with a lower --lr"
            )
