"""Stochastic gradient descent (Robbins & Monro 1951).

    w <- w - lr g

Ben-Nun & Hoefler 2019, Table 3 ("Learning Rate") and Algorithm 1, and
PyTorch's ``SGD`` without momentum: the same rule. A decaying learning rate
(Table 3, "Adaptive Learning Rate") is this rule with lr changed between
steps (``minidl.optim`` schedules do that).
"""


def sgd(w, g, state, lr):
    """One SGD step; the rule keeps no state, so the new state is empty."""
    return w - lr * g, {}
