"""Training with the reference rules: one optimizer that applies any rule to a list of parameters.

``step()`` does, for every parameter w that has a gradient g:

    g <- g + weight_decay w                    (L2 regularisation)
    w, state <- rule(w, g, state, **hyper)

Weight decay is the L2 (Tikhonov) penalty of Ben-Nun & Hoefler 2019, §3.2,
added to the gradient before the rule, as PyTorch's ``weight_decay`` and
``minidl.optim`` do. The new weights are copied into the parameter's array,
so layers and other references keep seeing the same array.
"""
from .adam import adam
from .adaptive import adagrad, rmsprop
from .momentum import momentum, nesterov
from .sgd import sgd

RULES = {"sgd": sgd, "momentum": momentum, "nesterov": nesterov, "adagrad": adagrad,
         "rmsprop": rmsprop, "adam": adam}


class ReferenceOptimizer:
    """``rule`` (a name in ``RULES`` or a function) with ``hyper`` (lr, momentum, ...) over ``params``."""

    def __init__(self, params, rule, weight_decay=0.0, **hyper):
        if isinstance(rule, str):
            if rule not in RULES:
                raise ValueError(f"ReferenceOptimizer: unknown rule {rule!r}; choose one of "
                                 f"{', '.join(RULES)} or pass a function (w, g, state, **hyper)")
            rule = RULES[rule]
        self.params = list(params)
        if not self.params:
            raise ValueError("ReferenceOptimizer: got an empty parameter list; pass model.parameters()")
        self.rule, self.hyper, self.weight_decay = rule, hyper, weight_decay
        self.state = [{} for _ in self.params]

    def zero_grad(self):
        """Forget the gradients before the next backward pass."""
        for p in self.params:
            p.grad = None

    def step(self):
        """Apply the rule once to every parameter that has a gradient."""
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad + self.weight_decay * p.data if self.weight_decay else p.grad
            new_w, self.state[i] = self.rule(p.data, g, self.state[i], **self.hyper)
            p.data[...] = new_w
