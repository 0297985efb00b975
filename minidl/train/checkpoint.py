"""Checkpoints: model, optimizer state, epoch and RNG state in one ``.npz`` file.

A checkpoint is data, never code: it is read with ``allow_pickle=False``,
and the metadata (epoch, configuration, RNG state) is one JSON string. It
is written atomically: a temporary file in the same folder, flushed to disk,
then renamed over the old one, so a crash mid-write leaves the previous
checkpoint intact.
"""
import json
import os
import zipfile

import numpy as np

from ..backend import to_numpy


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read or does not fit the model."""


def save_checkpoint(path, model, optimizer=None, **meta):
    """Write ``model`` (and ``optimizer``) state plus JSON-able ``meta`` to ``path`` atomically."""
    arrays = {f"model/{k}": to_numpy(v) for k, v in model.state_dict().items()}
    if optimizer is not None:
        state = optimizer.state_dict()
        arrays.update((f"optim/hyper/{k}", np.asarray(v)) for k, v in state["hyper"].items())
        for i, per_param in enumerate(state["state"]):
            arrays.update((f"optim/state/{i}/{k}", np.asarray(to_numpy(v)))
                          for k, v in per_param.items())
        meta["optimizer_params"] = len(state["state"])
    arrays["meta"] = np.array(json.dumps(meta))
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


class Checkpoint:
    """What ``load_checkpoint`` returns: ``model_state``, ``optimizer_state`` (or None), ``meta``."""

    def __init__(self, model_state, optimizer_state, meta):
        self.model_state, self.optimizer_state, self.meta = model_state, optimizer_state, meta


def _python(value):
    return value.item() if value.ndim == 0 else value


def load_checkpoint(path):
    """Read a checkpoint written by ``save_checkpoint``; errors name the file and the defect."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist; pass the path of a "
                                "checkpoint.npz written by 'minidl train' (in its --out folder)")
    try:
        with np.load(path, allow_pickle=False) as z:
            items = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CheckpointError(f"checkpoint {path!r} is corrupt or not a minidl checkpoint "
                              f"({exc}); use an earlier checkpoint or retrain") from None
    if "meta" not in items:
        raise CheckpointError(f"checkpoint {path!r} has no metadata; it was not written by minidl")
    meta = json.loads(str(items.pop("meta")))
    model = {k[len("model/"):]: v for k, v in items.items() if k.startswith("model/")}
    optimizer = None
    if "optimizer_params" in meta:
        hyper = {k.split("/", 2)[2]: _python(v) for k, v in items.items()
                 if k.startswith("optim/hyper/")}
        state = [{} for _ in range(meta["optimizer_params"])]
        for k, v in items.items():
            if k.startswith("optim/state/"):
                _, _, index, name = k.split("/", 3)
                state[int(index)][name] = _python(v)
        optimizer = {"hyper": hyper, "state": state}
    return Checkpoint(model, optimizer, meta)
