"""Batch normalisation and local response normalisation.

Batch norm (Ioffe & Szegedy 2015; Ben-Nun & Hoefler 2019, §3.1.1 and App. A.6): per channel,
    x_hat = (x - E[x]) / sqrt(Var[x] + eps),   y = gamma x_hat + beta,
with E and the biased Var over the batch (and spatial) axes in training, and
the running estimates in evaluation. Backward (App. A.6, simplified):
    dx = (gamma / sqrt(Var + eps)) (dy - mean(dy) - x_hat mean(dy x_hat)).
Running statistics follow PyTorch: r <- (1 - momentum) r + momentum s, with
the unbiased variance n/(n-1) Var for the running variance.

Synchronised batch norm (``group``: a communicator; Ioffe & Szegedy's statistics over the
samples of every rank of the group, as one process with the whole batch): the forward
allgathers each rank's [count, mean, M2] per channel (M2 = sum (x - mean)^2) and joins
them with Chan et al.'s parallel variance (1979),
    mean = sum_r n_r mean_r / n,   M2 = sum_r M2_r + sum_r n_r (mean_r - mean)^2,
every term of which is a sum of squares of deviations: unlike n E[x^2] - n E[x]^2, it
loses no digits when mean^2 >> Var (float32). The backward allreduces
[sum dy_hat, sum dy_hat x_hat] per channel (dy_hat = gamma dy) for the two means over the
group; n in the running variance is the group's count.

Local response norm (Krizhevsky et al. 2012, AlexNet), with PyTorch's scaling:
    b_c = a_c / (k + alpha/n * sum_{c' in window(c)} a_{c'}^2)^beta,
the window spanning channels c - n//2 .. c + (n-1)//2. Krizhevsky writes
alpha without the 1/n: pass alpha = n * 1e-4 to get the paper's alpha = 1e-4.
Each sample and position is normalised on its own, so both passes run over
chunks of the batch (or of the rows): the dozen elementwise passes of a chunk
then stay in the CPU cache.
"""

from ..autograd import Function, ShapeError, Tensor
from ..backend import get_array_module
from ..chunks import batch_chunks
from ..recompute import is_recomputing


def channel_axes(x):
    """Every axis but the channel axis 1: (0,) for (N, C), (0, 2, 3) for NCHW."""
    return (0,) + tuple(range(2, x.ndim))


def per_channel(v, ndim):
    """A (C,) vector shaped to broadcast along axis 1 of an ``ndim`` array."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def group_statistics(x, axes, group):
    """(n, mean, biased Var) per channel over the samples of every rank of ``group``, mean
    and Var shaped like ``x.mean(axes, keepdims=True)``: Chan et al.'s join (module doc)."""
    xp = get_array_module(x)
    n = x.size // x.shape[1]
    mean = x.mean(axis=axes, keepdims=True) if n else xp.zeros_like(x[:1].sum(axes, keepdims=True))
    centered = x - mean
    mine = xp.concatenate(
        [xp.full(1, n, x.dtype), mean.reshape(-1), (centered * centered).sum(axis=axes).reshape(-1)]
    )
    every = group.allgather(mine)
    c = x.shape[1]
    counts, means, m2s = every[:, :1], every[:, 1 : 1 + c], every[:, 1 + c :]
    total = int(counts.sum())
    joined = (counts * means).sum(axis=0) / max(total, 1)
    m2 = m2s.sum(axis=0) + (counts * (means - joined) ** 2).sum(axis=0)
    return total, joined.reshape(mean.shape), (m2 / max(total, 1)).reshape(mean.shape)


def group_mean(values, axes, n, group):
    """The means over ``group``'s samples (``n`` of them) of each array of ``values``, per
    channel: one allreduce of their sums."""
    xp = get_array_module(values[0])
    sums = xp.concatenate([v.sum(axis=axes).reshape(-1) for v in values])
    group.allreduce(sums, op="sum")
    c = values[0].shape[1]
    return [per_channel(sums[i * c : (i + 1) * c] / n, values[0].ndim) for i in range(len(values))]


class BatchNorm(Function):
    def forward(self, x, weight, bias, running_mean, running_var, training, momentum, eps, group):
        xp = get_array_module(x)
        axes = channel_axes(x)
        self.axes, self.training, self.group = axes, training, group
        if training:
            if group is None:
                n = x.size // x.shape[1]
                mean = x.mean(axis=axes, keepdims=True) if n > 1 else None
            else:
                n, mean, var = group_statistics(x, axes, group)
            if n < 2:
                where = "" if group is None else f" over the {group.size} ranks of its group"
                raise ValueError(
                    f"batch_norm: training needs more than one value per channel{where}, "
                    f"got input of shape {x.shape}; give it a larger batch"
                )
            self.n = n
            centered = x - mean
            if group is None:
                var = (centered * centered).mean(axis=axes, keepdims=True)
            if running_mean is not None:
                running_mean *= 1 - momentum
                running_mean += momentum * mean.reshape(-1)
                running_var *= 1 - momentum
                running_var += (momentum * n / (n - 1)) * var.reshape(-1)
        else:
            centered = x - per_channel(running_mean, x.ndim)
            var = per_channel(running_var, x.ndim)
        self.invstd = 1.0 / xp.sqrt(var + eps)
        self.x_hat = centered * self.invstd
        self.weight = per_channel(weight, x.ndim)
        return self.x_hat * self.weight + per_channel(bias, x.ndim)

    def backward(self, g):
        need_x, need_w, need_b = self.needs_input_grad
        gx = gw = gb = None
        if need_x:
            gx_hat = g * self.weight
            if self.training and self.group is not None:
                mean_g, mean_gx = group_mean(
                    [gx_hat, gx_hat * self.x_hat], self.axes, self.n, self.group
                )
                gx_hat = gx_hat - mean_g - self.x_hat * mean_gx
            elif self.training:
                gx_hat = (
                    gx_hat
                    - gx_hat.mean(axis=self.axes, keepdims=True)
                    - self.x_hat * (gx_hat * self.x_hat).mean(axis=self.axes, keepdims=True)
                )
            gx = gx_hat * self.invstd
        if need_w:
            gw = (g * self.x_hat).sum(axis=self.axes)
        if need_b:
            gb = g.sum(axis=self.axes)
        return gx, gw, gb


def batch_norm(
    x: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    group=None,
) -> Tensor:
    """Normalise each channel of an (N, C) or (N, C, ...) tensor (see the module doc).

    ``running_mean``/``running_var`` (Tensors or arrays of shape (C,)) are
    updated in place when ``training`` (not again when ``minidl.recompute`` recomputes the
    forward); evaluation uses them instead of the batch statistics. ``weight`` (gamma) and
    ``bias`` (beta) default to 1 and 0. ``group`` (a communicator, e.g. ``minidl.dist``'s):
    training statistics over the samples of all its ranks, each of which calls with its
    share of the batch (synchronised batch norm); None: this process's samples alone.
    """
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected (N, C) or (N, C, ...) input, got shape {x.shape}")
    xp = get_array_module(x.data)
    c = x.shape[1]
    weight = weight if weight is not None else Tensor(xp.ones(c, dtype=x.dtype))
    bias = bias if bias is not None else Tensor(xp.zeros(c, dtype=x.dtype))
    stats = [s.data if isinstance(s, Tensor) else s for s in (running_mean, running_var)]
    for name, v in (
        ("weight", weight.data),
        ("bias", bias.data),
        ("running_mean", stats[0]),
        ("running_var", stats[1]),
    ):
        if v is not None and v.shape != (c,):
            raise ShapeError(
                f"batch_norm: {name} has shape {v.shape}, expected ({c},) "
                f"for input of shape {x.shape}"
            )
    if not training and stats[0] is None:
        training = True  # no running estimates to use: normalise with the batch
    if training and is_recomputing():
        stats = [None, None]  # the first forward updated them: the batch's statistics suffice
    return BatchNorm.apply(
        x,
        weight,
        bias,
        running_mean=stats[0],
        running_var=stats[1],
        training=training,
        momentum=momentum,
        eps=eps,
        group=group,
    )


def window_sum(a, before, after, out=None):
    """s[:, c] = sum of a[:, c - before .. c + after] over channels, clipped at the edges."""
    c = a.shape[1]
    if out is None:
        s = a.copy(order="K")  # keep the layout: mixed layouts add several times slower
    else:
        s = out
        s[...] = a
    for d in range(1, after + 1):
        s[:, : c - d] += a[:, d:]
    for d in range(1, before + 1):
        s[:, d:] += a[:, : c - d]
    return s


def negative_power(s, beta, out=None):
    """s ** -beta; AlexNet's beta = 0.75 as 1 / (sqrt(s) sqrt(sqrt(s))), ~10x faster than pow."""
    xp = get_array_module(s)
    if beta != 0.75:
        return xp.power(s, -beta, out=out)
    root = xp.sqrt(s, out=out)
    root *= xp.sqrt(root)
    return xp.reciprocal(root, out=root)


class LocalResponseNorm(Function):
    TEMPORARIES = 8  # chunk arrays of CHUNK_BYTES / 8: fastest of 2, 4, 8, 12, 16 here

    def forward(self, x, size, alpha, beta, k):
        xp = get_array_module(x)
        self.size, self.alpha, self.beta = size, alpha, beta
        self.x = x
        self.scale, self.factor, self.y = (xp.empty_like(x) for _ in range(3))
        for part in self._chunks(x):
            xc = x[part]
            scale = window_sum(xc * xc, size // 2, (size - 1) // 2, out=self.scale[part])
            scale *= alpha / size
            scale += k
            factor = negative_power(scale, beta, out=self.factor[part])
            xp.multiply(xc, factor, out=self.y[part])
        return self.y

    def backward(self, g):
        # d b_c / d a_i = [i = c] s_c^-beta - (2 alpha beta / n) a_i a_c s_c^(-beta-1)
        xp = get_array_module(g)
        gx = xp.empty_like(g)
        coefficient = 2 * self.alpha * self.beta / self.size
        for part in self._chunks(g):
            gc = g[part]
            term = gc * self.y[part]
            term /= self.scale[part]
            back = window_sum(term, (self.size - 1) // 2, self.size // 2)
            back *= self.x[part]
            back *= coefficient
            xp.multiply(gc, self.factor[part], out=term)
            xp.subtract(term, back, out=gx[part])
        return gx

    def _chunks(self, a):
        """Index tuples cutting ``a`` into chunks along the batch or the rows (axis 2),
        whichever is further out in memory, so that a chunk is a few long runs: the batch
        for NCHW and channels-last arrays, the rows for batch-innermost ones (CHWN).
        Each sample and each position is normalised on its own, so any such cut works."""
        axis = 0 if a.strides[0] >= a.strides[2] else 2
        count = a.shape[axis]
        parts = batch_chunks(count, self.TEMPORARIES * a.nbytes // max(count, 1), a)
        return [(part,) if axis == 0 else (slice(None), slice(None), part) for part in parts]


def local_response_norm(
    x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0
) -> Tensor:
    """AlexNet's local response normalisation across channels (see the module doc)."""
    if x.ndim < 3:
        raise ShapeError(
            f"local_response_norm: expected (N, C, ...) input with at least "
            f"3 dimensions, got shape {x.shape}"
        )
    if size < 1:
        raise ValueError(f"local_response_norm: size must be positive, got {size}")
    return LocalResponseNorm.apply(x, size=size, alpha=alpha, beta=beta, k=k)
