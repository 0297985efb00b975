"""The six update rules of Ben-Nun & Hoefler's Table 3, LR schedules, gradient clipping."""

from .adagrad import AdaGrad
from .adam import Adam
from .momentum import Momentum, Nesterov
from .optimizer import Optimizer, clip_grad_norm_
from .plateau import ReduceOnPlateau
from .rmsprop import RMSProp
from .schedules import CosineAnnealingLR, LinearWarmup, LRScheduler, StepLR
from .sgd import SGD

OPTIMIZERS = {
    "sgd": SGD,
    "momentum": Momentum,
    "nesterov": Nesterov,
    "adagrad": AdaGrad,
    "rmsprop": RMSProp,
    "adam": Adam,
}

__all__ = [
    "Optimizer",
    "clip_grad_norm_",
    "SGD",
    "Momentum",
    "Nesterov",
    "AdaGrad",
    "RMSProp",
    "Adam",
    "LRScheduler",
    "StepLR",
    "CosineAnnealingLR",
    "LinearWarmup",
    "ReduceOnPlateau",
    "OPTIMIZERS",
]
