"""Adam (Kingma & Ba 2015): running means of g and g^2, corrected for their zero start.

With the step count t (0 before the first step) and m, v zero at first:

    t <- t + 1
    m <- b1 m + (1 - b1) g            first moment
    v <- b2 v + (1 - b2) g^2          second moment
    m_hat = m / (1 - b1^t);   v_hat = v / (1 - b2^t)      bias correction
    w <- w - lr m_hat / (sqrt(v_hat) + eps)

The bias correction undoes the pull towards zero of the first steps
(E[m] = (1 - b1^t) E[g] for a steady gradient). This is the original
algorithm and PyTorch's ``Adam``.

Ben-Nun & Hoefler 2019, Table 3, differ twice: eps sits inside the root,
sqrt(v_hat + eps), and the bias correction is folded into the recursion (the
corrected moments feed the next step), which changes the trajectory after
the first step. Their 1 - b^t denominators also need t to start at 1, as here.

An exercise region here must not call the tuned optimizers (``minidl.optim``): the check
fails one that does, since the exercise is to write the algorithm out.
"""

from ...backend import get_array_module


def adam(w, g, state, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """One Adam step; the state holds the step count ``"t"`` and the moments ``"m"`` and ``"v"``."""
    xp = get_array_module(w)
    b1, b2 = betas
    # BEGIN EXERCISE 4.3
    t = state.get("t", 0) + 1
    m = b1 * state.get("m", 0.0) + (1 - b1) * g
    v = b2 * state.get("v", 0.0) + (1 - b2) * g * g
    m_hat = m / (1 - b1**t)
    v_hat = v / (1 - b2**t)
    return w - lr * m_hat / (xp.sqrt(v_hat) + eps), {"t": t, "m": m, "v": v}
    # END EXERCISE 4.3
