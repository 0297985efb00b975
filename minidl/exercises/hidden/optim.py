"""Hidden checks of the optimiser exercises: other seeds and hyper-parameters."""

from minidl import optim
from minidl.reference.optim import adam, momentum

from .. import hidden_check
from ..checks.optim import compare_trajectory


@hidden_check("4.1", "momentum 0.99 and 0.7")
def momentum_other():
    for seed, hyper in ((41, dict(lr=0.02, momentum=0.99)), (42, dict(lr=0.2, momentum=0.7))):
        compare_trajectory("momentum", momentum, optim.Momentum, hyper, seed)


@hidden_check("4.3", "betas (0.8, 0.95), eps 1e-3")
def adam_other():
    compare_trajectory("adam", adam, optim.Adam, dict(lr=0.05, betas=(0.8, 0.95), eps=1e-3), 43)
