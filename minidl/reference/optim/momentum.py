"""Momentum (Polyak 1964; Qian 1999) and Nesterov momentum (Nesterov 1983; Sutskever et al. 2013).

Both keep a velocity v, zero before the first step:

    momentum:  v <- mu v + g;   w <- w - lr v
    Nesterov:  v <- mu v + g;   w <- w - lr (g + mu v)

This is PyTorch's ``SGD(momentum=mu)`` and ``SGD(momentum=mu,
nesterov=True)`` with no dampening. The Nesterov line is Sutskever et al.'s
look-ahead rule, v <- mu v - lr grad(w + mu v); w <- w + v, rewritten (as
Bengio et al. 2013 do) so that the stored weights are the look-ahead point
and the gradient is the one taken at them.

Ben-Nun & Hoefler 2019, Table 3, write momentum on weight differences,
w' = w + mu (w - w_prev) - lr g: the same trajectory while lr is constant
(w - w_prev = -lr v_prev), a different one when lr changes. Their Nesterov
row takes the gradient at w - mu v and applies v_t rather than v_{t+1}; the
standard look-ahead is at w + mu v.

An exercise region here must not call the tuned optimizers (``minidl.optim``): the check
fails one that does, since the exercise is to write the algorithm out.
"""


def momentum(w, g, state, lr, momentum=0.9):
    """One heavy-ball step; the state holds the velocity ``"v"``, which holds no lr: this
    step's lr scales the step (the check changes lr from step to step, where folding lr into
    v, v <- mu v + lr g, or stepping on w - w_prev gives another trajectory)."""
    # BEGIN EXERCISE 4.1
    v = momentum * state.get("v", 0.0) + g
    return w - lr * v, {"v": v}
    # END EXERCISE 4.1


def nesterov(w, g, state, lr, momentum=0.9):
    """One Nesterov step: the velocity as for momentum, the step lr (g + mu v) with this
    step's lr."""
    # BEGIN EXERCISE 4.1
    v = momentum * state.get("v", 0.0) + g
    return w - lr * (g + momentum * v), {"v": v}
    # END EXERCISE 4.1
