"""The six update rules of Ben-Nun & Hoefler's Table 3, LR schedules, gradient clipping."""
from .optimizer import Optimizer, clip_grad_norm_
from .sgd import SGD
from .momentum import Momentum, Nesterov
from .adagrad import AdaGrad
from .rmsprop import RMSProp
from .adam import Adam
from .schedules import LRScheduler, StepLR, CosineAnnealingLR, LinearWarmup

OPTIMIZERS = {"sgd": SGD, "momentum": Momentum, "nesterov": Nesterov,
              "adagrad": AdaGrad, "rmsprop": RMSProp, "adam": Adam}

__all__ = ["Optimizer", "clip_grad_norm_", "SGD", "Momentum", "Nesterov", "AdaGrad",
           "RMSProp", "Adam", "LRScheduler", "StepLR", "CosineAnnealingLR", "LinearWarmup",
           "OPTIMIZERS"]
