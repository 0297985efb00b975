"""Numerical gradient checks: backward() against central differences.

For a random projection v of the output, L(x) = sum(v * f(x)) is a scalar
whose gradient backward() computes; each input element's numerical
derivative is (L(x + eps e_i) - L(x - eps e_i)) / (2 eps), with error
O(eps^2). Checks run in float64, where eps ~ 1e-6 balances truncation
against rounding error. A gradient that is not finite (NaN or inf) on either
side fails the check: NaN compares false with every tolerance, so it would
otherwise pass unnoticed.
"""

import math

import numpy as np

from .autograd import Tensor, no_grad
from .backend import get_array_module, to_numpy


class GradcheckError(AssertionError):
    """The analytical and numerical gradients disagree; the message names the worst element."""


def gradcheck(
    fn, *tensors: Tensor, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0
) -> bool:
    """Check ``fn(*tensors)``'s gradients for every input that requires grad.

    Returns True, or raises ``GradcheckError`` naming the input, the index,
    both values and the tolerance of the worst element. Any NaN or inf in
    either gradient is the worst element: the first one found is reported.
    """
    checked = [t for t in tensors if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True; nothing to check")
    for i, t in enumerate(checked):
        if t.dtype != np.float64:
            raise TypeError(
                f"gradcheck: input {i} is {t.dtype}; numerical gradients need "
                "float64 tensors: create them with dtype='float64'"
            )
    saved = [t.grad for t in checked]
    try:
        out = fn(*tensors)
        xp = get_array_module(out.data)
        v = xp.asarray(np.random.default_rng(seed).standard_normal(out.shape))
        for t in checked:
            t.grad = None
        out.backward(v)
        analytical = [t.grad if t.grad is not None else xp.zeros_like(t.data) for t in checked]

        def objective():
            with no_grad():
                return float((fn(*tensors).data * v).sum())

        worst = None
        for i, (t, grad) in enumerate(zip(checked, analytical)):
            numerical = _central_differences(objective, t.data, eps)
            with np.errstate(invalid="ignore"):  # inf - inf: replaced by inf below
                err = abs(grad - numerical) - (atol + rtol * abs(numerical))
            err = to_numpy(xp.where(xp.isfinite(grad) & xp.isfinite(numerical), err, xp.inf))
            k = int(np.argmax(err)) if err.size else 0
            if err.size and err.flat[k] > 0 and (worst is None or err.flat[k] > worst[0]):
                idx = np.unravel_index(k, err.shape)
                worst = (err.flat[k], i, idx, float(grad[idx]), float(numerical[idx]))
    finally:
        for t, g in zip(checked, saved):
            t.grad = g
    if worst is not None:
        _, i, idx, a, n = worst
        where = f"gradcheck: input {i} at index {tuple(int(j) for j in idx)}"
        if not math.isfinite(a):
            raise GradcheckError(
                f"{where}: the analytical gradient (backward) is {a} "
                f"(numerical {n:.8g}); backward must return finite values"
            )
        if not math.isfinite(n):
            raise GradcheckError(
                f"{where}: the numerical gradient is {n} (analytical {a:.8g}): "
                f"fn is not finite within eps={eps} of this point; check it "
                "at a point where it is defined"
            )
        raise GradcheckError(
            f"{where}: analytical {a:.8g} vs numerical {n:.8g} (difference {abs(a - n):.3g} "
            f"exceeds atol={atol} + rtol={rtol} * |numerical|)"
        )
    return True


def _central_differences(objective, x, eps):
    """d objective / d x by perturbing each element of ``x`` in place (then restoring it)."""
    xp = get_array_module(x)
    if not x.flags.c_contiguous:
        raise ValueError("gradcheck: inputs must be contiguous arrays (as md.tensor makes them)")
    grad = xp.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        original = flat[k].item()
        flat[k] = original + eps
        plus = objective()
        flat[k] = original - eps
        minus = objective()
        flat[k] = original
        gflat[k] = (plus - minus) / (2 * eps)
    return grad
