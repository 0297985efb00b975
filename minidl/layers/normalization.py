"""Batch normalisation and local response normalisation layers."""

import numpy as np

from .. import functional as F
from ..autograd import ShapeError, Tensor, as_dtype
from ..recompute import is_recomputing
from .checks import int_arg, number_arg
from .module import Module, Parameter


class _BatchNorm(Module):
    """gamma = 1, beta = 0, running mean 0 and variance 1, as in PyTorch. A recomputed forward
    (``minidl.recompute``) counts no batch and updates no running statistics: the first did.

    ``group`` (a communicator; ``minidl.dist.convert_sync_batchnorm`` sets it): synchronised
    batch norm, the training statistics over the samples of every rank of the group, each
    rank calling with its share of the batch (``F.batch_norm``); None: this process's own.
    """

    input_dims = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        dtype: str = "float32",
        group=None,
    ):
        super().__init__()
        self.group = group
        name = type(self).__name__
        self.num_features = num_features = int_arg(
            name, "num_features", num_features, hint="the input's channels, x.shape[1]"
        )
        self.eps = number_arg(
            name, "eps", eps, lambda v: v > 0, "a number > 0 (it keeps the variance away from zero)"
        )
        self.momentum = number_arg(
            name,
            "momentum",
            momentum,
            lambda v: 0 <= v <= 1,
            "the running statistics' update weight, in [0, 1]",
        )
        dtype = as_dtype(dtype)
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
            raise ShapeError(
                f"{type(self).__name__}: expected an input with "
                f"{' or '.join(map(str, self.input_dims))} dimensions, got {x.shape}"
            )
        if x.shape[1] != self.num_features:
            raise ShapeError(
                f"{type(self).__name__}({self.num_features}): input has "
                f"{x.shape[1]} channels (shape {x.shape})"
            )
        if self.training and self.running_mean is not None and not is_recomputing():
            self.num_batches_tracked.data += 1
        weight, bias = self.affine()
        return F.batch_norm(
            x,
            self.running_mean,
            self.running_var,
            weight,
            bias,
            training=self.training or self.running_mean is None,
            momentum=self.momentum,
            eps=self.eps,
            group=self.group,
        )

    def affine(self):
        """(gamma, beta) as the forward reads them (a spatial block sums their gradients)."""
        return self.weight, self.bias

    def extra_repr(self):
        synced = "" if self.group is None else f", group of {self.group.size} ranks"
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}{synced}"


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) inputs."""

    input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) inputs."""

    input_dims = (4,)


class LocalResponseNorm(Module):
    """AlexNet's LRN across channels (PyTorch's alpha/size convention; see the functional doc)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size = int_arg(
            "LocalResponseNorm", "size", size, hint="the channels each sum spans; AlexNet uses 5"
        )
        self.alpha = number_arg(
            "LocalResponseNorm", "alpha", alpha, lambda v: v >= 0, "a number >= 0"
        )
        self.beta = number_arg("LocalResponseNorm", "beta", beta, lambda v: v >= 0, "a number >= 0")
        self.k = number_arg(
            "LocalResponseNorm",
            "k",
            k,
            lambda v: v > 0,
            "a number > 0 (it keeps the denominator away from zero)",
        )

    def forward(self, x):
        return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
