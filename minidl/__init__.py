"""minidl: a from-scratch deep-learning framework on NumPy/CuPy and MPI."""
from . import backend
from .autograd import Tensor, Function, no_grad, is_grad_enabled, tensor, ShapeError, DeviceError
from . import functional
from . import layers
from . import optim
from . import data
from . import conv
from . import models
from . import train
from . import dist
from . import random
from .random import manual_seed
from .gradcheck import gradcheck, GradcheckError

__version__ = "0.1.0"
