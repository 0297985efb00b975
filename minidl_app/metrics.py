"""Run records: metrics as JSON lines (one object per line), and a plot of the curves.

Appends reach the disk before the call returns (flush and fsync), so a record is whole
or, after a crash mid-write, a damaged last line, which ``read_metrics`` reports by file
and line (or, with ``drop_torn_tail``, drops).
"""

import json
import os

from minidl.atomic import atomic_write, naming_error


class MetricsError(ValueError):
    """A metrics file with a line that is not a JSON object."""


def append_metrics(path, *records):
    """Append JSON objects, one per line (the file is created on first use), and sync them."""
    text = "".join(json.dumps(record) + "\n" for record in records)
    try:
        with open(path, "a") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise naming_error(exc, path, "the records before it are intact") from exc


def read_metrics(path, drop_torn_tail=False):
    """All records of a metrics file, in order. A line that is not a JSON object raises
    ``MetricsError`` naming file and line; ``drop_torn_tail`` drops a cut last line instead."""
    with open(path) as f:
        lines = f.read().split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if drop_torn_tail and number == len(lines):
                break  # the last line has no newline: a crash cut it
            raise MetricsError(
                f"{path}, line {number}: not a JSON record ({exc.msg}): the file "
                "was damaged; delete or repair that line"
            ) from None
        if not isinstance(record, dict):
            raise MetricsError(
                f"{path}, line {number}: a JSON {type(record).__name__}, not a "
                "record; delete or repair that line"
            )
        records.append(record)
    return records


def rewrite_metrics(path, records):
    """Replace the file's contents with ``records`` atomically."""
    with atomic_write(path) as f:
        f.write("".join(json.dumps(record) + "\n" for record in records).encode())


def plot_curves(records, path):
    """Loss and accuracy per epoch (train and test) as a PNG, and the top-1 and top-5 test
    error when the records hold them; returns the path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    epochs = [r for r in records if r.get("kind") == "epoch"]
    if not epochs:
        return None
    x = [r["epoch"] for r in epochs]
    errors = all("test_top5_error" in r for r in epochs)
    fig, axes = plt.subplots(1, 3 if errors else 2, figsize=(15 if errors else 10, 4))
    ax_loss, ax_acc = axes[:2]
    if errors:
        for k in (1, 5):
            axes[2].plot(
                x, [100 * r[f"test_top{k}_error"] for r in epochs], marker="o", label=f"top-{k}"
            )
        axes[2].set(xlabel="epoch", ylabel="test error (%)", title="top-1 and top-5 error")
    for split in ("train", "test"):
        ax_loss.plot(x, [r[f"{split}_loss"] for r in epochs], marker="o", label=split)
        ax_acc.plot(x, [100 * r[f"{split}_acc"] for r in epochs], marker="o", label=split)
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    try:
        with atomic_write(path) as handle:
            fig.savefig(handle, dpi=100, format="png")
    finally:
        plt.close(fig)
    return path
