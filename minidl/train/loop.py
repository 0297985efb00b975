"""The training loop (Ben-Nun & Hoefler 2019, Alg. 2): per minibatch forward, loss, backward, update.

``train_epoch`` and ``evaluate`` work with any model, optimizer (or wrapper
with ``zero_grad``/``step``) and loader yielding ``(images, labels)`` arrays.
With a communicator, the per-epoch sums are added over all ranks so that
every rank reports the global loss and accuracy.
"""
import math
import time

import numpy as np

from .. import functional as F
from ..autograd import Tensor, no_grad
from ..backend import to_device, to_numpy
from ..dist.data_parallel import NonFiniteGradientError
from ..dist.watchdog import progress as made_progress


STOPPED = ("training stopped before this update (the last checkpoint is kept). "
           "Lower --lr, or clip gradients")


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; training stops before the update."""


def _progress(loader, description, enabled):
    if not enabled:
        return loader
    from tqdm import tqdm
    return tqdm(loader, desc=description, leave=False, mininterval=0.5, unit="batch")


def _inputs(model, x, device):
    """A batch of images as a Tensor on ``device`` in the model's dtype (float64 runs too)."""
    x = to_device(x, device)
    dtype = next(model.parameters()).dtype
    return Tensor(x if x.dtype == dtype else x.astype(dtype))


def _global_sums(comm, *values):
    """The element-wise sum of ``values`` over all ranks (the values themselves without comm)."""
    if comm is None:
        return values
    total = np.array(values, dtype=np.float64)
    comm.allreduce(total, op="sum")
    return tuple(total)


def train_epoch(model, optimizer, loader, epoch=0, device="cpu", progress=False, comm=None,
                straggler=None):
    """One pass over ``loader``; returns {"loss", "acc", "images", "seconds", "images_per_s",
    "compute_seconds", "slept_seconds"}.

    ``straggler`` (a ``minidl.dist.straggler.Straggler``) sleeps after each
    step's forward and backward, before the update, to simulate a slow rank.
    """
    model.train()
    loss_sum = correct = seen = 0.0
    compute = slept = 0.0
    start = time.perf_counter()
    bar = _progress(loader, f"epoch {epoch}", progress)
    weigh = getattr(optimizer, "set_batch_weight", None)  # data parallel: uneven local batches
    for step, (x, y) in enumerate(bar):
        if weigh is not None:
            weigh(len(y), loader.global_batch_size(step))
        optimizer.zero_grad()
        began = time.perf_counter()
        loss, value = None, 0.0  # an empty share of a short last batch still joins the step
        if len(y):
            logits = model(_inputs(model, x, device))
            loss = F.cross_entropy(logits, y)
            value = loss.item()
        spent = time.perf_counter() - began
        # with a communicator, every rank must take the same decision (or the others would
        # wait forever): the data-parallel optimizer checks the averaged gradient instead
        if comm is None and not math.isfinite(value):
            raise NonFiniteLossError(f"epoch {epoch}, step {step}: the loss is {value}; " + STOPPED)
        if loss is not None:
            began = time.perf_counter()
            loss.backward()
            spent += time.perf_counter() - began
        compute += spent
        if straggler is not None:
            slept += straggler.pause(spent)
        try:
            optimizer.step()
        except NonFiniteGradientError as exc:
            raise NonFiniteLossError(f"epoch {epoch}, step {step}: {exc} (this rank's loss: "
                                     f"{value}); " + STOPPED) from None
        made_progress(f"epoch {epoch}, step {step}")
        if loss is None:
            continue
        n = len(y)
        loss_sum += value * n
        correct += int((to_numpy(logits.data.argmax(axis=1)) == y).sum())
        seen += n
        if progress and step % 20 == 0:
            rate = seen / (time.perf_counter() - start)
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}", acc=f"{correct / seen:.3f}",
                            img_s=f"{rate:.0f}")
    seconds = time.perf_counter() - start
    loss_sum, correct, seen = _global_sums(comm, loss_sum, correct, seen)
    return {"loss": loss_sum / max(seen, 1), "acc": correct / max(seen, 1), "images": int(seen),
            "seconds": seconds, "images_per_s": seen / seconds,
            "compute_seconds": compute, "slept_seconds": slept}


def evaluate(model, loader, num_classes, device="cpu", comm=None):
    """Loss, accuracy and confusion matrix (rows: true class, columns: predicted)."""
    model.eval()
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    loss_sum = 0.0
    with no_grad():
        for x, y in loader:
            if len(y) == 0:
                continue
            logits = model(_inputs(model, x, device))
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            made_progress("evaluation")
            predicted = to_numpy(logits.data.argmax(axis=1))
            np.add.at(confusion, (y, predicted), 1)
    if comm is not None:
        comm.allreduce(confusion, op="sum")
        (loss_sum,) = _global_sums(comm, loss_sum)
    seen = confusion.sum()
    return {"loss": loss_sum / max(seen, 1), "acc": np.trace(confusion) / max(seen, 1),
            "images": int(seen), "confusion": confusion}
