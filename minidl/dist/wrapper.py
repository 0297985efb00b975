"""The base of the distributed optimizers: a wrapped optimizer's interface, delegated explicitly.

A distributed optimizer (``DistributedOptimizer``, avg:H's ``ModelAveraging``,
EASGD's worker) changes what ``step()`` does around an ordinary optimizer,
and keeps that optimizer's parameters, learning rate and state. It exposes
exactly these, delegated, so that the training loop, LR schedules (which
read and set ``lr``) and checkpoints (``state_dict``) treat the wrapper like
the optimizer itself; everything else of the wrapped optimizer (its
momentum, betas...) is on ``.optimizer``.
"""


class OptimizerWrapper:
    """``params``, ``state``, ``lr``, ``zero_grad`` and the state dicts of ``optimizer``.

    Subclasses define ``step()``.
    """

    def __init__(self, optimizer):
        self.optimizer = optimizer

    @property
    def params(self):
        """The wrapped optimizer's parameter list."""
        return self.optimizer.params

    @property
    def state(self):
        """The wrapped optimizer's per-parameter state (momentum buffers...)."""
        return self.optimizer.state

    @property
    def lr(self):
        """The wrapped optimizer's learning rate; setting it sets theirs (LR schedules do)."""
        return self.optimizer.lr

    @lr.setter
    def lr(self, value):
        self.optimizer.lr = value

    def zero_grad(self):
        """Forget the gradients before the next backward."""
        self.optimizer.zero_grad()

    def state_dict(self):
        """The wrapped optimizer's hyper-parameters and state (what a checkpoint saves)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        """Restore the wrapped optimizer from ``state_dict()``."""
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self):
        return f"{type(self).__name__}({self.optimizer!r})"
