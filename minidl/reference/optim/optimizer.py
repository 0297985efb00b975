"""Training with the reference rules: an optimizer that applies any rule to a list of parameters.

``ReferenceOptimizer`` fills in the ``update`` of ``minidl.optim``'s template,
so ``step()`` does, for every parameter w that has a gradient g:

    (clip all gradients to a global norm, if asked)
    g <- g + weight_decay w                    (L2 regularisation)
    w, state <- rule(w, g, state, lr=lr, **hyper)

Weight decay is the L2 (Tikhonov) penalty of Ben-Nun & Hoefler 2019, §3.2,
added to the gradient before the rule, as PyTorch does. The new weights are
copied into the parameter's array, so layers keep seeing the same array;
``lr`` is an attribute, so the learning-rate schedules of ``minidl.optim``
drive it as they drive the tuned optimizers.
"""

from ...optim.optimizer import Optimizer
from .adam import adam
from .adaptive import adagrad, rmsprop
from .momentum import momentum, nesterov
from .sgd import sgd

RULES = {
    "sgd": sgd,
    "momentum": momentum,
    "nesterov": nesterov,
    "adagrad": adagrad,
    "rmsprop": rmsprop,
    "adam": adam,
}


class ReferenceOptimizer(Optimizer):
    """``rule`` (a name in ``RULES`` or a function) with ``lr`` and ``hyper`` (momentum,
    betas, ...)."""

    def __init__(self, params, rule, lr, weight_decay=0.0, clip_grad_norm=None, **hyper):
        if isinstance(rule, str):
            if rule not in RULES:
                raise ValueError(
                    f"ReferenceOptimizer: unknown rule {rule!r}; choose one of "
                    f"{', '.join(RULES)} or pass a function (w, g, state, lr, **hyper)"
                )
            rule = RULES[rule]
        super().__init__(params, lr, weight_decay, clip_grad_norm)
        self.rule, self.hyper = rule, hyper

    def update(self, w, g, state):
        new_w, new_state = self.rule(w, g, state, lr=self.lr, **self.hyper)
        w[...] = new_w
        kept = dict(new_state)  # a rule may hand back the dict it was given
        state.clear()
        state.update(kept)
