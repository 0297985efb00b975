"""Divide the learning rate when the validation error stops improving (Krizhevsky et al. 2012).

"The heuristic which we followed was to divide the learning rate by 10 when
the validation error rate stopped improving with the current learning rate"
(Sec. 5). Called once per epoch with that epoch's validation error: when
``patience`` epochs in a row bring no error below the best so far, the rate
is multiplied by ``factor`` and the count starts again.
"""

import math


class ReduceOnPlateau:
    """``step(error)`` after each evaluation; lr <- lr * factor after ``patience`` epochs
    without a new best error."""

    def __init__(self, optimizer, factor: float = 0.1, patience: int = 2):
        if not 0 < factor < 1 or patience < 1:
            raise ValueError(
                f"ReduceOnPlateau: factor must be in (0, 1) and patience >= 1, got {factor}, "
                f"{patience}"
            )
        self.optimizer, self.factor, self.patience = optimizer, factor, patience
        self.best, self.bad_epochs = math.inf, 0

    def step(self, error):
        if error < self.best:
            self.best, self.bad_epochs = error, 0
        else:
            self.bad_epochs += 1
        if self.bad_epochs >= self.patience:
            self.optimizer.lr *= self.factor
            self.bad_epochs = 0
        return self.optimizer.lr

    def state_dict(self):
        return {"lr": self.optimizer.lr, "best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state):
        self.optimizer.lr, self.best = state["lr"], state["best"]
        self.bad_epochs = int(state["bad_epochs"])
