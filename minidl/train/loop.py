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
from dataclasses import dataclass, field

import numpy as np

from .. import functional as F
from ..autograd import Tensor, no_grad
from ..backend import get_array_module, to_device, to_numpy
from .callbacks import STOPPED, Diverged, NonFiniteLossError, StopOnNonFiniteLoss
from .progress import progress as progress_bar


def batch_inputs(model, x, device):
    """A batch of images as a Tensor on ``device`` in the model's dtype (float64 runs too; a
    rank that holds no parameters, such as a pipeline stage of pooling, passes it as it is)."""
    x = to_device(x, device)
    dtype = next((p.dtype for p in model.parameters()), x.dtype)
    return Tensor(x if x.dtype == dtype else x.astype(dtype))


def _global_sums(comm, *values):
    """The element-wise sum of ``values`` over all ranks (the values themselves without comm)."""
    if comm is None:
        return values
    total = np.array(values, dtype=np.float64)
    comm.allreduce(total, op="sum")
    return tuple(total)


def train_epoch(
    model,
    optimizer,
    loader,
    epoch=0,
    device="cpu",
    progress=False,
    comm=None,
    callbacks=None,
    step=None,
):
    """One pass over ``loader``; returns {"loss", "acc", "images", "seconds", "images_per_s",
    "compute_seconds", "slept_seconds"}.

    ``step(x, y) -> (loss, correct)``, when given, is what a batch does in place of the
    textbook forward, backward and update (a pipeline's schedule runs all three). ``callbacks``
    default to the non-finite loss check for a process alone (``comm`` None) and to none under
    a communicator. An update that the optimizer refuses for a non-finite gradient raises
    ``NonFiniteLossError``.
    """
    if callbacks is None:
        callbacks = [StopOnNonFiniteLoss()] if comm is None else []
    model.train()
    loss_sum = correct = seen = 0.0
    compute = slept = 0.0
    start = time.perf_counter()
    batches = progress_bar(loader, f"epoch {epoch}", progress) if progress else loader
    for index, (x, y) in enumerate(batches):
        where = f"epoch {epoch}, step {index}"
        for callback in callbacks:
            callback.before_step(index, len(y))
        began = time.perf_counter()
        if step is not None:  # forward, backward and update as the step's schedule orders them
            value, hits = step(x, y)
            compute += time.perf_counter() - began
        else:
            optimizer.zero_grad()
            loss, value = None, 0.0  # an empty share of a short last batch still joins the step
            with np.errstate(over="ignore", invalid="ignore"):  # a non-finite loss: see below
                if len(y):
                    logits = model(batch_inputs(model, x, device))
                    loss = F.cross_entropy(logits, y)
                    value = loss.item()
                for callback in callbacks:
                    callback.after_forward(epoch, index, value)
                if loss is not None:
                    loss.backward()
            spent = time.perf_counter() - began
            compute += spent
            slept += sum(callback.after_backward(spent) for callback in callbacks)
            try:
                optimizer.step()
            except ArithmeticError as exc:
                raise NonFiniteLossError(
                    f"{where}: {exc} (this rank's loss: {value}); " + STOPPED
                ) from None
            hits = int((to_numpy(logits.data.argmax(axis=1)) == y).sum()) if len(y) else 0
        for callback in callbacks:
            callback.after_step(where)
        loss_sum += value * len(y)
        correct += hits
        seen += len(y)
        if progress and index % 20 == 0 and seen:
            rate = seen / (time.perf_counter() - start)
            batches.set_postfix(
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
            logits = model(batch_inputs(model, x.reshape(-1, *x.shape[2:]) if crops else x, device))
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


@dataclass
class Training:
    """What one rank trains with, whatever the layout; ``train_epochs`` runs it.

    ``model``, ``optimizer``, ``loader``, ``step``, ``callbacks`` and ``comm`` are
    ``train_epoch``'s. ``schedulable``: the optimizer an LR schedule drives (None: none on
    this rank). ``placement``: what evaluation and checkpoints see of a layout whose ranks
    hold shares of the model (None: ``model`` is the whole model): ``evaluated``, run on
    ``replicas``' shares of the test set; ``model_state()``, the serial model's (name, array)
    pairs, and ``optimizer_state(state_dict)``, a one-process optimizer's state with its
    per-parameter states as a generator, both streamed to rank 0 one entry at a time
    (collective; None elsewhere); ``scatter_state(state)``, this rank's share of a
    one-process optimizer state. ``checkpoints_optimizer``:
    whether the checkpoint keeps the optimizer's state. ``around_epoch(train) -> stats``: how
    an epoch runs around ``train()`` (None: just that). ``options``: what ``config.json``
    adds; ``describe(record)``: the console line of a ``"dist"`` record; ``timeline()``: the
    ``--trace`` recorder of a layout with its own; ``progress_rank``: the rank with a bar.
    """

    model: object
    optimizer: object
    loader: object
    step: object = None
    callbacks: list = field(default_factory=list)
    comm: object = None
    schedulable: object = None
    placement: object = None
    checkpoints_optimizer: bool = True
    around_epoch: object = None
    options: dict = field(default_factory=dict)
    describe: object = None
    timeline: object = None
    progress_rank: int = 0


def train_epochs(run, training):
    """Train ``run``'s epochs with ``training``; returns the last evaluation (None: nothing left).

    Each epoch: train this rank's share (``train_epoch``), evaluate on the test set, then
    ``run.end_epoch`` (stop on divergence, step the LR schedule, rank 0 writes the
    checkpoint and the records); the callbacks' epoch hooks run around these.
    """
    config, result = run.config, None
    run.begin(training)
    for epoch in range(run.start_epoch + 1, config.epochs + 1):
        lr = run.lr(training)
        training.loader.set_epoch(epoch - 1)  # the epoch's shuffle, also after a resume
        for callback in training.callbacks:
            callback.before_epoch(epoch)

        def train():
            return train_epoch(
                training.model,
                training.optimizer,
                training.loader,
                epoch,
                config.device,
                progress=config.progress and run.rank == training.progress_rank,
                comm=training.comm,
                callbacks=training.callbacks,
                step=training.step,
            )

        try:
            stats = train() if training.around_epoch is None else training.around_epoch(train)
        except NonFiniteLossError as exc:
            raise Diverged(str(exc)) from None
        records = [r for callback in training.callbacks for r in callback.after_epoch(epoch, stats)]
        result = run.evaluate(training)
        run.end_epoch(epoch, stats.pop("lr", lr), stats, result, records, training)
        for callback in training.callbacks:
            callback.after_evaluation()
    return run.finish(result)
