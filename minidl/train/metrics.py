"""Run records: metrics as JSON lines (one object per line), and a plot of the curves."""
import json
import os


def append_metrics(path, record):
    """Append one JSON object as a line (the file is created on first use)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_metrics(path):
    """All records of a metrics file, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_curves(records, path):
    """Loss and accuracy per epoch (train and test) as a PNG; returns the path or None.

    Needs matplotlib (the ``plot`` extra); without it no plot is drawn.
    """
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
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for split in ("train", "test"):
        ax_loss.plot(x, [r[f"{split}_loss"] for r in epochs], marker="o", label=split)
        ax_acc.plot(x, [100 * r[f"{split}_acc"] for r in epochs], marker="o", label=split)
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return path
