"""The base of the distributed optimizers: a wrapped optimizer's interface, delegated explicitly.

A distributed optimizer (``DistributedOptimizer``, avg:H's ``ModelAveraging``,
EASGD's worker) changes what ``step()`` does around an ordinary optimizer.
It delegates exactly the optimizer's parameters, state, learning rate and
state dicts, so that the training loop, LR schedules and checkpoints treat
it like the optimizer itself; the rest (momentum, betas...) is on ``.optimizer``.
"""


class OptimizerWrapper:
    """``params``, ``state``, ``lr`` (settable), ``zero_grad`` and the state dicts of
    ``optimizer``; subclasses define ``step()``."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    @property
    def params(self):
        return self.optimizer.params

    @property
    def state(self):
        return self.optimizer.state

    @property
    def lr(self):
        return self.optimizer.lr

    @lr.setter
    def lr(self, value):
        self.optimizer.lr = value

    def zero_grad(self):
        self.optimizer.zero_grad()

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self):
        return f"{type(self).__name__}({self.optimizer!r})"
