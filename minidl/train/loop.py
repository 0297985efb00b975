"""The training loop (Ben-Nun & Hoefler 2019, Alg. 2): per minibatch forward, loss,
backward, update.

``train_epoch`` and ``evaluate`` work with any model, optimizer (or wrapper
with ``zero_grad``/``step``) and loader yielding ``(images, labels)`` arrays.
What a run adds (a watchdog, a straggler, batch weighting, the non-finite
loss check) plugs in through ``callbacks`` (``callbacks.Callback``). With a
communicator, the per-epoch sums are added over all ranks so that every rank
reports the global loss and accuracy.
"""

import time

import numpy as np

from .. import functional as F
from ..autograd import Tensor, no_grad
from ..backend import to_device, to_numpy
from .callbacks import STOPPED, NonFiniteLossError, StopOnNonFiniteLoss
from .progress import progress as progress_bar


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


def train_epoch(
    model, optimizer, loader, epoch=0, device="cpu", progress=False, comm=None, callbacks=None
):
    """One pass over ``loader``; returns {"loss", "acc", "images", "seconds", "images_per_s",
    "compute_seconds", "slept_seconds"}.

    ``callbacks`` default to the non-finite loss check for a process alone
    (``comm`` None) and to none under a communicator. An update that the
    optimizer refuses for a non-finite gradient raises ``NonFiniteLossError``.
    """
    if callbacks is None:
        callbacks = [StopOnNonFiniteLoss()] if comm is None else []
    model.train()
    loss_sum = correct = seen = 0.0
    compute = slept = 0.0
    start = time.perf_counter()
    bar = progress_bar(loader, f"epoch {epoch}", progress)
    for step, (x, y) in enumerate(bar):
        for callback in callbacks:
            callback.before_step(step, len(y))
        optimizer.zero_grad()
        began = time.perf_counter()
        loss, value = None, 0.0  # an empty share of a short last batch still joins the step
        with np.errstate(over="ignore", invalid="ignore"):  # a non-finite loss is reported below
            if len(y):
                logits = model(_inputs(model, x, device))
                loss = F.cross_entropy(logits, y)
                value = loss.item()
            for callback in callbacks:
                callback.after_forward(epoch, step, value)
            if loss is not None:
                loss.backward()
        spent = time.perf_counter() - began
        compute += spent
        slept += sum(callback.after_backward(spent) for callback in callbacks)
        try:
            optimizer.step()
        except ArithmeticError as exc:
            raise NonFiniteLossError(
                f"epoch {epoch}, step {step}: {exc} (this rank's loss: {value}); " + STOPPED
            ) from None
        for callback in callbacks:
            callback.after_step(f"epoch {epoch}, step {step}")
        if loss is None:
            continue
        n = len(y)
        loss_sum += value * n
        correct += int((to_numpy(logits.data.argmax(axis=1)) == y).sum())
        seen += n
        if progress and step % 20 == 0:
            rate = seen / (time.perf_counter() - start)
            bar.set_postfix(
                loss=f"{loss_sum / seen:.4f}", acc=f"{correct / seen:.3f}", img_s=f"{rate:.0f}"
            )
    seconds = time.perf_counter() - start
    loss_sum, correct, seen = _global_sums(comm, loss_sum, correct, seen)
    return {
        "loss": loss_sum / max(seen, 1),
        "acc": correct / max(seen, 1),
        "images": int(seen),
        "seconds": seconds,
        "images_per_s": seen / seconds,
        "compute_seconds": compute,
        "slept_seconds": slept,
    }


def evaluate(model, loader, num_classes, device="cpu", comm=None, callbacks=()):
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
            for callback in callbacks:
                callback.after_step("evaluation")
            predicted = to_numpy(logits.data.argmax(axis=1))
            np.add.at(confusion, (y, predicted), 1)
    if comm is not None:
        comm.allreduce(confusion, op="sum")
        (loss_sum,) = _global_sums(comm, loss_sum)
    seen = confusion.sum()
    return {
        "loss": loss_sum / max(seen, 1),
        "acc": np.trace(confusion) / max(seen, 1),
        "images": int(seen),
        "confusion": confusion,
    }
