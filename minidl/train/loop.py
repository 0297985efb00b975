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
from ..backend import get_array_module, to_device, to_numpy
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


def top_k_hits(logits, labels, k=5):
    """How many rows of ``logits`` rank their label among their ``k`` largest (top-k
    accuracy's numerator; every row counts when there are at most ``k`` classes)."""
    xp = get_array_module(logits)
    k = min(k, logits.shape[1])
    best = xp.argpartition(-logits, k - 1, axis=1)[:, :k]
    return int((to_numpy(best) == np.asarray(labels)[:, None]).any(axis=1).sum())


def average_crops(logits, crops):
    """Logits of ``n * crops`` images -> the log of each image's softmax averaged over its
    crops (the paper's ten-crop test, Krizhevsky et al. 2012, Sec. 4.1): ``(n, classes)``."""
    xp = get_array_module(logits.data)
    probabilities = F.softmax(logits, axis=1).data.reshape(-1, crops, logits.shape[1])
    return Tensor(xp.log(probabilities.mean(axis=1)))


def evaluate(model, loader, num_classes, device="cpu", comm=None, callbacks=()):
    """Loss, accuracy, top-5 accuracy and confusion matrix (rows: true class, columns:
    predicted). Batches of shape ``(n, crops, C, H, W)`` are scored by ``average_crops``."""
    model.eval()
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    loss_sum, top5 = 0.0, 0
    with no_grad():
        for x, y in loader:
            if len(y) == 0:
                continue
            crops = x.shape[1] if x.ndim == 5 else 0
            logits = model(_inputs(model, x.reshape(-1, *x.shape[2:]) if crops else x, device))
            if crops:
                logits = average_crops(logits, crops)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            top5 += top_k_hits(logits.data, y)
            for callback in callbacks:
                callback.after_step("evaluation")
            predicted = to_numpy(logits.data.argmax(axis=1))
            np.add.at(confusion, (y, predicted), 1)
    if comm is not None:
        comm.allreduce(confusion, op="sum")
        loss_sum, top5 = _global_sums(comm, loss_sum, top5)
    seen = confusion.sum()
    return {
        "loss": loss_sum / max(seen, 1),
        "acc": np.trace(confusion) / max(seen, 1),
        "top5_acc": top5 / max(seen, 1),
        "images": int(seen),
        "confusion": confusion,
    }
