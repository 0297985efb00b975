"""minidl: a from-scratch deep-learning framework on NumPy/CuPy and MPI."""

# autograd first: it imports functional at its end, which needs conv, which needs Tensor
from . import autograd, backend, conv, data, dist, functional, layers, models, optim, random, train
from .autograd import DeviceError, Function, ShapeError, Tensor, is_grad_enabled, no_grad, tensor
from .gradcheck import GradcheckError, gradcheck
from .random import manual_seed
from .recompute import checkpoint

__version__ = "0.1.0"
