"""Softmax, log-softmax and the two losses of Ben-Nun & Hoefler 2019 (§2.1, Table 2).

softmax(z)_i = exp(z_i - max z) / sum_k exp(z_k - max z) (shifting by the
maximum changes nothing mathematically and keeps exp from overflowing).
Cross-entropy with integer labels: l = -mean_n log softmax(z_n)[y_n], whose
gradient is (softmax(z) - onehot(y)) / N. Squared loss: mean (p - t)^2.
"""

import numpy as np

from ..autograd import Function, ShapeError, Tensor
from ..backend import get_array_module, to_device
from .arithmetic import _pair


def _shift_by_max(x, axis):
    """x - max(x) along ``axis``, without NumPy's warnings when the logits are not finite.

    Logits holding inf (a diverged run) give inf - inf = NaN here, and so a
    NaN loss: that loss is the report a training loop checks and stops on,
    so the overflow and invalid-value warnings would only print ahead of it.
    The values are the same with or without the warnings.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return x - x.max(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    xp = get_array_module(x)
    shifted = _shift_by_max(x, axis)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


class Softmax(Function):
    def forward(self, x, axis):
        xp = get_array_module(x)
        self.axis = axis
        e = xp.exp(_shift_by_max(x, axis))
        e /= e.sum(axis=axis, keepdims=True)
        self.y = e
        return e

    def backward(self, g):
        # dx = y * (g - sum(g * y))
        gy = g * self.y
        return gy - self.y * gy.sum(axis=self.axis, keepdims=True)


class LogSoftmax(Function):
    def forward(self, x, axis):
        self.axis = axis
        self.y = _log_softmax(x, axis)
        return self.y

    def backward(self, g):
        # dx = g - softmax(x) * sum(g)
        xp = get_array_module(g)
        return g - xp.exp(self.y) * g.sum(axis=self.axis, keepdims=True)


class CrossEntropy(Function):
    """Softmax cross-entropy of (N, C) logits against N integer labels, fused."""

    def forward(self, logits, labels, reduction):
        xp = get_array_module(logits)
        n = logits.shape[0]
        logp = _log_softmax(logits, axis=1)
        picked = -logp[xp.arange(n), labels]
        self.labels, self.reduction = labels, reduction
        self.prob = xp.exp(logp, out=logp)
        if reduction == "none":
            return picked
        total = picked.sum()
        return total / n if reduction == "mean" else total

    def backward(self, g):
        xp = get_array_module(g)
        n = self.prob.shape[0]
        grad = self.prob.copy()
        grad[xp.arange(n), self.labels] -= 1
        if self.reduction == "none":
            return grad * g[:, None]
        return grad * (g / n if self.reduction == "mean" else g)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Probabilities along ``axis`` (numerically stable)."""
    return Softmax.apply(x, axis=axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """log softmax(x) along ``axis``, computed without forming softmax first."""
    return LogSoftmax.apply(x, axis=axis)


REDUCTIONS = ("mean", "sum", "none")


def cross_entropy(logits: Tensor, labels, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy of ``(N, C)`` logits and ``N`` integer class labels.

    ``reduction`` is ``"mean"`` (default, as in Ben-Nun & Hoefler's minibatch
    average), ``"sum"`` or ``"none"`` (one loss per sample).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction {reduction!r} is not one of {REDUCTIONS}")
    labels = _check_labels(logits, labels)
    return CrossEntropy.apply(logits, labels=labels, reduction=reduction)


def _check_labels(logits, labels):
    if logits.ndim != 2:
        raise ShapeError(
            f"cross_entropy: logits must be (N, C), got shape {logits.shape}; "
            "flatten the features first"
        )
    labels = labels.data if isinstance(labels, Tensor) else labels
    if not hasattr(labels, "dtype"):
        labels = np.asarray(labels)
    labels = to_device(labels, logits.device)
    if labels.dtype.kind not in "iu":
        raise TypeError(
            f"cross_entropy: labels must be integers, got dtype {labels.dtype}; "
            "pass class indices, e.g. md.tensor(y, dtype='int64') or an int array"
        )
    if labels.shape != (logits.shape[0],):
        raise ShapeError(
            f"cross_entropy: labels of shape {labels.shape} do not match "
            f"logits of shape {logits.shape}; expected ({logits.shape[0]},)"
        )
    n_classes = logits.shape[1]
    if labels.size and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
        bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
        raise ValueError(
            f"cross_entropy: label {bad} is out of range for {n_classes} "
            f"classes; labels must lie in [0, {n_classes - 1}]"
        )
    return labels


def mse_loss(pred: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error (p - t)^2, averaged (``"mean"``), summed, or per element."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"mse_loss: reduction {reduction!r} is not one of {REDUCTIONS}")
    pred, target = _pair(pred, target)
    if pred.shape != target.shape:
        raise ShapeError(
            f"mse_loss: prediction shape {pred.shape} differs from target shape {target.shape}"
        )
    diff = pred - target
    sq = diff * diff
    if reduction == "none":
        return sq
    return sq.mean() if reduction == "mean" else sq.sum()
