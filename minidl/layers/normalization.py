"""Batch normalisation and local response normalisation layers."""
import numpy as np

from .. import functional as F
from ..autograd import ShapeError, Tensor, as_dtype
from .module import Module, Parameter


class _BatchNorm(Module):
    """gamma = 1, beta = 0, running mean 0 and variance 1, as in PyTorch."""

    input_dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, dtype="float32"):
        super().__init__()
        dtype = as_dtype(dtype)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(np.ones(num_features, dtype=dtype)) if affine else None
        self.bias = Parameter(np.zeros(num_features, dtype=dtype)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(num_features, dtype=dtype)))
            self.register_buffer("running_var", Tensor(np.ones(num_features, dtype=dtype)))
            self.register_buffer("num_batches_tracked", Tensor(np.zeros((), dtype=np.int64)))
        else:
            self.running_mean = self.running_var = None

    def forward(self, x):
        if x.ndim not in self.input_dims:
            raise ShapeError(f"{type(self).__name__}: expected an input with "
                             f"{' or '.join(map(str, self.input_dims))} dimensions, got {x.shape}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}({self.num_features}): input has "
                             f"{x.shape[1]} channels (shape {x.shape})")
        if self.training and self.running_mean is not None:
            self.num_batches_tracked.data += 1
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=self.training or self.running_mean is None,
                            momentum=self.momentum, eps=self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) inputs."""
    input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) inputs."""
    input_dims = (4,)


class LocalResponseNorm(Module):
    """AlexNet's LRN across channels (PyTorch's alpha/size convention; see the functional doc)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x):
        return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
