"""Winograd minimal filtering F(m x m, 3 x 3) (Lavin & Gray 2016; Ben-Nun & Hoefler 2019, B.4).

Each m x m output tile comes from an alpha x alpha input tile (alpha = m + r - 1 = m + 2;
neighbouring tiles overlap by 2):

    Y = A^T [ sum_c (G w_kc G^T) o (B^T d_c B) ] A

Stage by stage (many channels), both transforms are applied to all tiles at once as one GEMM
with a Kronecker matrix (``(B^T kron B^T) vec(d)``); with few channels (``blocked``), blocks
of 64 tiles go through every stage while in cache, the transforms one dimension at a time
(``blocked_correlation``). Either way the elementwise stage is alpha^2 independent (K x C) @ (C x P)
products over the P = N*ceil(OH/m)*ceil(OW/m) tiles: alpha^2*K*C*P multiplies instead of the
direct 9*m^2*K*C*P, 2.25x fewer for F(2x2,3x3) (alpha=4) and 4x fewer for F(4x4,3x3)
(alpha=6). (Ben-Nun & Hoefler 2019, Table 6's Winograd work formula counts each transform
once and leaves out these per-channel/per-tile multiplicities; ``multiplies`` counts them.)

Gradients, with Z = U o V the elementwise products of one tile:

* input: dx is the stride-1 correlation of dy, padded by 2 - p, with the kernel flipped in
  space and transposed in channels (``ConvGeometry.transposed``), through the forward.
* weight: the adjoint of the forward in the transformed domain, dZ = A dY A^T (per m x m
  output-gradient tile), dU = sum_tiles dZ o V, dW = G^T dU G: Winograd F(3x3, m x m) with
  the output-gradient tile as the "filter", the same input tiles V (kept by the forward) as
  the data, and again alpha^2 (K x P) @ (P x C) GEMMs.

Transform matrices: ``_MATRICES`` (checked against direct correlation in the tests);
F(4,3)'s larger entries (8, 1/24) cost accuracy (Ben-Nun & Hoefler 2019, §4.3): F(4x4)
errors are measurably larger than F(2x2) errors in float32.

Supported: 3x3 kernels at stride 1, and strided kernels with 3 taps per polyphase component
(ceil(K/s) = 3, e.g. AlexNet's 11x11 at stride 4), which ``space_to_depth`` turns into a
stride-1 3x3 convolution over s*s*C channels; dilation 1 only.
"""

import functools
import math
from fractions import Fraction

import numpy as np

from ..backend import empty, get_array_module
from ..chunks import CHUNK_BYTES, batch_chunks
from ..intmath import ceil_div
from ..parallel import get_num_threads, parallel_for
from .base import ConvAlgorithm
from .layout import NHWC, as_strided, contiguous, contiguous_copy, flipped_kernel, padded
from .space_to_depth import (
    depth_to_space,
    kernel_from_depth,
    kernel_to_depth,
    phase_geometry,
    space_to_depth,
)

_MATRICES = {  # m: (B^T, G, A^T), exact, rows separated by ";"
    2: (
        "1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1",
        "1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1",
        "1 1 1 0; 0 1 -1 -1",
    ),
    4: (
        "4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1",
        "1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1",
        "1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1",
    ),
}


BLOCK_TILES = 64  # tiles per block of ``blocked_correlation``
BLOCK_GEMM_SIZE = 2**18  # M*N*K up to which OpenBLAS runs a GEMM on the calling thread


def winograd_matrices(m):
    """(B^T, G, A^T) of F(m, 3) as float64 NumPy arrays."""
    return tuple(
        np.array([[float(Fraction(v)) for v in row.split()] for row in matrix.split(";")])
        for matrix in _MATRICES[m]
    )


@functools.cache
def _matrices(m, dtype, xp):
    """(B^T, G, A^T) in ``dtype`` on xp's device."""
    return tuple(xp.asarray(a, dtype=dtype) for a in winograd_matrices(m))


@functools.cache
def _kron_matrices(m, dtype, xp):
    """Kronecker forms (B^T kron B^T, G kron G, A^T kron A^T) in ``dtype`` on xp's device."""
    return tuple(xp.asarray(np.kron(a, a), dtype=dtype) for a in winograd_matrices(m))


def tile_counts(out_h, out_w, m):
    """Tiles per column and per row: ceil(OH/m), ceil(OW/m)."""
    return ceil_div(out_h, m), ceil_div(out_w, m)


def tile_elements(side, tiles, channels):
    """Elements per image of a tile array, side x side values per tile and channel: the kernels
    and ``Winograd.workspace_elements`` chunk the batch by these counts."""
    return side * side * tiles * channels


def full_tile_pads(geom, m):
    """Pads (top, bottom, left, right) that make the input exactly m*th + 2 by m*tw + 2
    (bottom/right may crop)."""
    (th, tw), (ph, pw) = tile_counts(geom.out_h, geom.out_w, m), geom.padding
    return (ph, m * th + 2 - geom.height - ph, pw, m * tw + 2 - geom.width - pw)


def _transform_input_chunk(x, pads, tiles, m, out):
    """``out`` (alpha^2, n*T*C) = (B^T kron B^T) d for the tiles d of the images x (n, C, H, W):
    pad to NHWC, gather the overlapping tiles, one GEMM (the temporaries die on return)."""
    xp = get_array_module(x)
    alpha, (th, tw), c = m + 2, tiles, x.shape[1]
    xpad = padded(x, pads, NHWC)  # (n, m*th + 2, m*tw + 2, C)
    sn, sh, sw, sc = xpad.strides
    view = as_strided(
        xpad, (alpha, alpha, xpad.shape[0], th, tw, c), (sh, sw, sn, m * sh, m * sw, sc)
    )
    d = empty(view.shape, x.dtype, xp, "winograd input tiles")
    d[...] = view
    xp.matmul(_kron_matrices(m, x.dtype, xp)[0], d.reshape(alpha * alpha, -1), out=out)


def transform_input(x, geom, m):
    """V (alpha^2, N, T, C): (B^T kron B^T) applied to every alpha x alpha input tile of x padded
    to whole tiles; T = th*tw tiles per image; chunk by chunk."""
    xp = get_array_module(x)
    tiles, pads = tile_counts(geom.out_h, geom.out_w, m), full_tile_pads(geom, m)
    a2, t, (n, c) = (m + 2) ** 2, tiles[0] * tiles[1], x.shape[:2]
    v = empty((a2, n, t, c), x.dtype, xp, "winograd transformed input")
    for part in batch_chunks(n, tile_elements(m + 2, t, c) * x.itemsize, x):
        _transform_input_chunk(x[part], pads, tiles, m, v[:, part].reshape(a2, -1))
    return v


def transform_weight(w, m):
    """U (alpha^2, K, C) = (G kron G) applied to every 3x3 kernel."""
    xp = get_array_module(w)
    k, c = w.shape[:2]
    kron_g = _kron_matrices(m, w.dtype, xp)[1]
    u = empty((kron_g.shape[0], k * c), w.dtype, xp, "winograd transformed kernels")
    single_thread_matmul(kron_g, contiguous(w.transpose(2, 3, 0, 1)).reshape(9, k * c), u)
    return u.reshape(-1, k, c)


def single_thread_matmul(a, b, out):
    """``out = a @ b`` in column slices small enough (``BLOCK_GEMM_SIZE``) that OpenBLAS
    computes each on the calling thread: a GEMM on its threads leaves them spinning for
    a while after it (measured ~0.1 s), slowing the blocks that two threads of
    ``parallel_for`` then run."""
    xp = get_array_module(a)
    width = max(1, BLOCK_GEMM_SIZE // (a.shape[0] * a.shape[1]))
    for start in range(0, b.shape[1], width):
        xp.matmul(a, b[:, start : start + width], out=out[:, start : start + width])


def _output_chunk(z, tiles, m, out):
    """``out`` (n, m*th, m*tw, K) = A^T Z A for the tiles of z (alpha^2, n, T, K), NHWC."""
    xp = get_array_module(z)
    (th, tw), (a2, k) = tiles, (z.shape[0], z.shape[-1])
    z = z.reshape(a2, -1)
    y_tiles = empty((m * m, z.shape[1]), z.dtype, xp, "winograd output tiles")
    xp.matmul(_kron_matrices(m, z.dtype, xp)[2], z, out=y_tiles)
    y_tiles = y_tiles.reshape(m, m, -1, th, tw, k)
    out.reshape(-1, th, m, tw, m, k)[...] = y_tiles.transpose(2, 3, 0, 4, 1, 5)


def winograd_correlation(x, w, geom, m, keep=False):
    """Stride-1 3x3 correlation of x (N, C, H, W): ``(y, V if keep else None)``.

    y is NCHW-indexed but NHWC in memory, as the GEMMs give the tiles; writing them NCHW
    would cost a transposing copy (measured: 9 of 31 ms on 16x64x56x56). Few channels
    (``blocked``): tile block by tile block through every stage, else stage by stage.
    """
    if blocked(geom, x):
        return blocked_correlation(x, w, geom, m, keep)
    xp = get_array_module(x)
    n, k, oh, ow = geom.output_shape
    th, tw = tile_counts(oh, ow, m)
    v = transform_input(x, geom, m)
    a2 = v.shape[0]
    z = empty((a2, n * th * tw, k), x.dtype, xp, "winograd products")
    xp.matmul(v.reshape(a2, n * th * tw, -1), transform_weight(w, m).transpose(0, 2, 1), out=z)
    z = z.reshape(a2, n, th * tw, k)  # (alpha^2, N, T, K)
    y = empty((n, m * th, m * tw, k), x.dtype, xp, "winograd output")  # NHWC, whole tiles
    for part in batch_chunks(n, tile_elements(m, th * tw, k) * x.itemsize, x):
        _output_chunk(z[:, part], (th, tw), m, y[part])
    return y[:, :oh, :ow].transpose(0, 3, 1, 2), (v if keep else None)


def blocked(geom, like):
    """Whether ``blocked_correlation`` computes this stride-1 geometry: on the CPU (``like``
    a NumPy array), for ``blocked_channels``."""
    return get_array_module(like) is np and blocked_channels(geom)


def blocked_channels(geom):
    """Few enough channels that a block's products, 64 x C by C x K, stay below
    ``BLOCK_GEMM_SIZE`` (and U, alpha^2 x C x K, in L2: 590 KB for 64 -> 64)."""
    return BLOCK_TILES * geom.in_channels * geom.out_channels <= BLOCK_GEMM_SIZE


def on_cpu(chunk):
    """Whether a workspace estimate's ``chunk`` function is the CPU's: on a GPU the whole
    batch is one chunk, however large an image (``minidl/chunks.py``)."""
    return chunk(2, CHUNK_BYTES) == 1


def tile_blocks(n, th, tw):
    """Blocks of about ``BLOCK_TILES`` tiles, as (images, tile rows) slices: tile rows of one
    image when an image has that many tiles, else whole images."""
    per_image = th * tw
    if per_image >= BLOCK_TILES:
        step = max(1, BLOCK_TILES // tw)
        return [
            (slice(i, i + 1), slice(r, min(r + step, th)))
            for i in range(n)
            for r in range(0, th, step)
        ]
    step = max(1, BLOCK_TILES // per_image)
    return [(slice(i, min(i + step, n)), slice(0, th)) for i in range(0, n, step)]


def blocked_correlation(x, w, geom, m, keep=False):
    """``winograd_correlation`` one block of tiles at a time, every stage of a block while
    its data is in the core's cache, the blocks on the threads of ``minidl/parallel.py``.

    Stage by stage, the batch's tiles V, products Z and output tiles go through main
    memory between the passes (~29 MB each on 16x64x56x56, the transforms then bound by
    memory bandwidth); a block of 64 tiles keeps them in L2, and each GEMM of a block is
    small enough that OpenBLAS runs it on the calling thread (M*N*K <= 2^18), so two
    blocks run at once on two cores. Per block (P tiles): the input rows, padded, NHWC;
    the P alpha x alpha tiles d; V = B^T d B as two GEMMs with B^T (alpha x alpha) over
    views, one dimension at a time (3x fewer multiplies than the Kronecker form); the
    alpha^2 products Z = V U^T; Y = A^T Z A, again one dimension at a time; the m x m
    tiles of Y into y. Each block writes its own tiles of y (and of V when ``keep``).
    """
    xp = get_array_module(x)
    n, k, oh, ow = geom.output_shape
    c, alpha = x.shape[1], m + 2
    th, tw = tile_counts(oh, ow, m)
    bt, _, at = _matrices(m, x.dtype, xp)
    u_t = contiguous_copy(transform_weight(w, m).transpose(0, 2, 1))  # (alpha^2, C, K)
    xpad = padded(x, full_tile_pads(geom, m), NHWC)  # (N, m*th + 2, m*tw + 2, C)
    sn, sh, sw, sc = xpad.strides
    y = empty((n, m * th, m * tw, k), x.dtype, xp, "winograd output")  # NHWC, whole tiles
    a2 = alpha * alpha
    v = empty((a2, n * th, tw * c), x.dtype, xp, "winograd transformed input") if keep else None

    def block(part):
        images, rows = part
        nb, r = images.stop - images.start, rows.stop - rows.start
        p = nb * r * tw
        sizes = (max(a2 * p * c, m * m * p * k), max(a2 * p * c, alpha * m * p * k), a2 * p * k)
        scratch = empty(sum(sizes), x.dtype, xp, "winograd block")
        first_region, second_region = scratch[: sizes[0]], scratch[sizes[0] : sum(sizes[:2])]
        d = first_region[: a2 * p * c].reshape(alpha, alpha, p * c)
        e = second_region[: a2 * p * c].reshape(alpha, alpha, p * c)
        z = scratch[sum(sizes[:2]) :].reshape(a2, p, k)
        origin = xpad[images.start, m * rows.start :]  # the block's first tile
        d.reshape(alpha, alpha, nb, r, tw, c)[...] = as_strided(
            origin, (alpha, alpha, nb, r, tw, c), (sh, sw, sn, m * sh, m * sw, sc)
        )
        xp.matmul(bt, d.transpose(1, 0, 2), out=e.transpose(1, 0, 2))  # B^T d, per column
        start = images.start * th + rows.start  # the block's tile rows, counted over the batch
        tiles = d if v is None else v[:, start : start + nb * r].reshape(alpha, alpha, p * c)
        xp.matmul(bt, e, out=tiles)  # (B^T d) B, per row of B^T d: V
        xp.matmul(tiles.reshape(a2, p, c), u_t, out=z)
        f = second_region[: alpha * m * p * k].reshape(alpha, m, p * k)
        xp.matmul(at, z.reshape(alpha, alpha, p * k), out=f)  # Z A, per row of Z
        out = first_region[: m * m * p * k].reshape(m, m, p * k)
        xp.matmul(at, f.transpose(1, 0, 2), out=out.transpose(1, 0, 2))  # A^T (Z A): Y
        y.reshape(n, th, m, tw, m, k)[images, rows] = out.reshape(m, m, nb, r, tw, k).transpose(
            2, 3, 0, 4, 1, 5
        )

    parallel_for(block, tile_blocks(n, th, tw))
    return y[:, :oh, :ow].transpose(0, 3, 1, 2), (v.reshape(a2, n, th * tw, c) if keep else None)


def _output_gradient_chunk(dy, tiles, m, out):
    """``out`` (alpha^2, n*T*K) = A dY A^T for every m x m tile of dy (n, K, OH, OW), with a
    zero output gradient in the partial tiles at the bottom and right."""
    xp = get_array_module(dy)
    (th, tw), (n, k, oh, ow) = tiles, dy.shape
    if (oh, ow) == (m * th, m * tw):
        block = dy.transpose(NHWC)  # a view, no copy
    else:
        block = padded(dy, (0, m * th - oh, 0, m * tw - ow), NHWC)
    gathered = empty((m, m, n, th, tw, k), dy.dtype, xp, "winograd output-gradient tiles")
    gathered[...] = block.reshape(n, th, m, tw, m, k).transpose(2, 4, 0, 1, 3, 5)
    xp.matmul(_kron_matrices(m, dy.dtype, xp)[2].T, gathered.reshape(m * m, -1), out=out)


class Winograd(ConvAlgorithm):
    """F(m x m, 3 x 3): 3x3 kernels at stride 1 (or 3 taps per stride phase), any padding."""

    reuses = frozenset({"backward_weight"})  # the transformed input tiles V

    def __init__(self, m):
        self.m = m
        self.alpha = m + 2
        self.name = f"winograd_f{m}x{m}_3x3"

    def unsupported(self, geom):
        kh, kw = geom.kernel_h, geom.kernel_w
        if geom.dilation != (1, 1):
            return f"dilation {geom.dilation} is not supported (dilation 1 only)"
        inner = phase_geometry(geom)
        if (inner.kernel_h, inner.kernel_w) == (3, 3):
            return None
        if geom.stride == (1, 1):
            return f"a {kh}x{kw} kernel is not supported (3x3 only at stride 1)"
        return (
            f"stride {geom.stride} is not supported for a {kh}x{kw} kernel (3x3 at stride 1, "
            "or a strided kernel with 3 taps per phase, ceil(K/s) = 3, e.g. 11x11 at stride 4)"
        )

    def forward(self, x, w, geom, keep=False):
        if geom.stride != (1, 1):
            return self.forward(
                space_to_depth(x, geom), kernel_to_depth(w, geom), phase_geometry(geom), keep
            )
        return winograd_correlation(x, w, geom, self.m, keep)

    def backward_input(self, dy, w, geom, saved=None):
        if geom.stride != (1, 1):
            phases = self.backward_input(dy, kernel_to_depth(w, geom), phase_geometry(geom))
            return depth_to_space(phases, geom)
        return winograd_correlation(dy, flipped_kernel(w), geom.transposed(), self.m)[0]

    def backward_weight(self, dy, x, geom, saved=None):
        if geom.stride != (1, 1):
            phases = None if saved is not None else space_to_depth(x, geom)
            return kernel_from_depth(
                self.backward_weight(dy, phases, phase_geometry(geom), saved), geom
            )
        xp = get_array_module(dy)
        m, a2 = self.m, self.alpha**2
        n, k, oh, ow = dy.shape
        th, tw = tile_counts(oh, ow, m)
        v = transform_input(x, geom, m) if saved is None else saved
        dz = empty((a2, n, th * tw, k), dy.dtype, xp, "winograd output gradient")  # A dY A^T
        for part in batch_chunks(n, tile_elements(self.alpha, th * tw, k) * dy.itemsize, dy):
            _output_gradient_chunk(dy[part], (th, tw), m, dz[:, part].reshape(a2, -1))
        dz = dz.reshape(a2, n * th * tw, k).transpose(0, 2, 1)
        du = xp.matmul(dz, v.reshape(a2, n * th * tw, -1))  # (alpha^2, K, C)
        kron_g = _kron_matrices(m, dy.dtype, xp)[1]
        dw = (kron_g.T @ du.reshape(a2, -1)).reshape(3, 3, k, -1)
        return xp.ascontiguousarray(dw.transpose(2, 3, 0, 1))

    def multiplies(self, geom):
        if geom.stride != (1, 1):
            return self.multiplies(phase_geometry(geom))
        m, a = self.m, self.alpha
        th, tw = tile_counts(geom.out_h, geom.out_w, m)
        p = geom.batch * th * tw
        k, c = geom.out_channels, geom.in_channels
        return {
            "elementwise": a * a * k * c * p,  # the alpha^2 batched GEMMs
            "input_transform": a**4 * c * p,  # dense Kronecker GEMM per tile
            "weight_transform": a * a * 9 * k * c,
            "output_transform": m * m * a * a * k * p,
        }

    def workspace_elements(self, geom, pass_, chunk):
        """The peak of the kernel's arrays minus the pass's result (see ``_correlation_peak``)."""
        if geom.stride != (1, 1):
            return self._phases_workspace(geom, pass_, chunk)
        if pass_ == "forward":
            return self._correlation_peak(geom, chunk) - math.prod(geom.output_shape)
        if pass_ == "backward_input":  # a correlation of dy (K channels) giving H x W
            return self._correlation_peak(geom.transposed(), chunk) - math.prod(geom.input_shape)
        return self._weight_gradient_peak(geom, chunk) - 9 * geom.out_channels * geom.in_channels

    def _input_transform_peak(self, geom, chunk):
        """V, plus one chunk's padded input and gathered tiles (``transform_input``)."""
        m, (th, tw), n, c = self.m, self._tiles(geom), geom.batch, geom.in_channels
        per_image = tile_elements(self.alpha, th * tw, c)
        padded = (m * th + 2) * (m * tw + 2) * c
        return n * per_image + chunk(n, per_image) * (padded + per_image)

    def _tiles(self, geom):
        return tile_counts(geom.out_h, geom.out_w, self.m)

    def _blocked_peak(self, geom):
        """Peak elements of ``blocked_correlation``, its result included: the kernels' copy and
        U, then U^T; then U^T, the padded input, y in whole tiles and one block's scratch on
        each thread that runs blocks (``parallel.get_num_threads``)."""
        n, c, k, m, alpha = geom.batch, geom.in_channels, geom.out_channels, self.m, self.alpha
        th, tw = self._tiles(geom)
        blocks = tile_blocks(n, th, tw)
        images, rows = blocks[0]
        p = (images.stop - images.start) * (rows.stop - rows.start) * tw
        a2 = alpha * alpha
        scratch = max(a2 * c, m * m * k) * p + max(a2 * c, alpha * m * k) * p + a2 * k * p
        padded_input = n * (m * th + 2) * (m * tw + 2) * c
        y = n * m * th * m * tw * k
        threads = min(get_num_threads(), len(blocks))
        kernels = max(9 * k * c + a2 * k * c, 2 * a2 * k * c)
        return max(kernels, a2 * k * c + padded_input + y + threads * scratch)

    def _correlation_peak(self, geom, chunk):
        """Peak elements of ``winograd_correlation``, C -> K channels, its result included
        (``_blocked_peak`` when ``blocked``).

        In turn: V and one input chunk; V, U and the kernels' copy (9KC), then
        V, U and Z; V, Z, the whole-tile output Y and one chunk of output tiles.
        """
        if on_cpu(chunk) and blocked_channels(geom):
            return self._blocked_peak(geom)
        n, c, k, alpha = geom.batch, geom.in_channels, geom.out_channels, self.alpha
        t = math.prod(self._tiles(geom))
        v, z = n * tile_elements(alpha, t, c), n * tile_elements(alpha, t, k)
        per_image = tile_elements(self.m, t, k)
        return max(
            self._input_transform_peak(geom, chunk),
            v + alpha**2 * k * c + max(9 * k * c, z),
            v + z + (n + chunk(n, per_image)) * per_image,
        )

    def _weight_gradient_peak(self, geom, chunk):
        """Peak elements of ``backward_weight`` at stride 1, its result (9KC) included.

        In turn: V and one input chunk; V, dZ and one chunk of output-gradient
        tiles (twice when partial tiles need a padded copy); V, dZ, dU, G^T dU G, dW.
        """
        n, c, k, m, alpha = geom.batch, geom.in_channels, geom.out_channels, self.m, self.alpha
        tiles = self._tiles(geom)
        t = tiles[0] * tiles[1]
        v, dz = n * tile_elements(alpha, t, c), n * tile_elements(alpha, t, k)
        copies = 1 if (geom.out_h, geom.out_w) == (m * tiles[0], m * tiles[1]) else 2
        gathered = copies * tile_elements(m, t, k) * chunk(n, tile_elements(alpha, t, k))
        return max(
            self._input_transform_peak(geom, chunk),
            v + dz + gathered,
            v + dz + alpha**2 * k * c + 2 * 9 * k * c,
        )

    def _phases_workspace(self, geom, pass_, chunk):
        """Workspace of a strided pass: the stride-1 pass on the phases, plus the phases of x
        (or dx) and of w, each made through one padded copy (``space_to_depth``)."""
        inner = phase_geometry(geom)
        phases, kernel = math.prod(inner.input_shape), math.prod(inner.weight_shape)
        inner_workspace = self.workspace_elements(inner, pass_, chunk)
        if pass_ == "forward":  # the phases' output is the output
            y = math.prod(geom.output_shape)
            return max(2 * phases - y, phases + 2 * kernel - y, phases + kernel + inner_workspace)
        if pass_ == "backward_input":  # the phases of dx, then dx through a padded copy
            dx = math.prod(geom.input_shape)
            return max(2 * kernel - dx, kernel + inner_workspace + phases - dx, 2 * phases + dx)
        dw = math.prod(geom.weight_shape)
        return max(2 * phases - dw, phases + inner_workspace + kernel - dw, phases + 2 * kernel)

    def saved_elements(self, geom):
        if geom.stride != (1, 1):
            return self.saved_elements(phase_geometry(geom))
        t = math.prod(self._tiles(geom))
        return geom.batch * tile_elements(self.alpha, t, geom.in_channels)


WINOGRAD_F2X2_3X3 = Winograd(2)
WINOGRAD_F4X4_3X3 = Winograd(4)
