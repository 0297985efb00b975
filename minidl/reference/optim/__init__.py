"""The six update rules of Ben-Nun & Hoefler 2019 (Table 3) as plain functions, and an
optimizer for them.

Every rule is a function ``rule(w, g, state, **hyper) -> (new_w, new_state)``:
it reads the weights ``w``, the gradient ``g`` and the rule's state (a dict
of arrays, empty before the first step) and returns new ones, changing
nothing it was given. The semantics are PyTorch's (and ``minidl.optim``'s)
for the same hyper-parameters, so trajectories can be compared step by step;
each module's docstring says where Ben-Nun & Hoefler's Table 3 writes the rule
differently.

    sgd.py        SGD (Robbins & Monro 1951)
    momentum.py   momentum (Polyak 1964; Qian 1999), Nesterov (Nesterov 1983; Sutskever et al. 2013)
    adaptive.py   AdaGrad (Duchi et al. 2011), RMSProp (Tieleman & Hinton 2012)
    adam.py       Adam (Kingma & Ba 2015)
    optimizer.py  ``ReferenceOptimizer``: any rule over a list of parameters
                  (weight decay, clipping)
"""

from .adam import adam
from .adaptive import adagrad, rmsprop
from .momentum import momentum, nesterov
from .optimizer import RULES, ReferenceOptimizer
from .sgd import sgd

__all__ = [
    "sgd",
    "momentum",
    "nesterov",
    "adagrad",
    "rmsprop",
    "adam",
    "RULES",
    "ReferenceOptimizer",
]
