"""im2col: unroll the receptive fields into a matrix, then one GEMM (Chellapilla et al. 2006).

Ben-Nun & Hoefler 2019, App. B.2: the column matrix A is (C*KH*KW) x (N*OH*OW), the kernel
matrix F = w reshaped to K x (C*KH*KW), and the output B = F A. The rows of A are ordered
(u, v, c); its columns are the output positions, in one of two memory layouts:

* channel-innermost (NHWC), columns (n, i, j): each window row is KW*C contiguous values
  (6x faster than the channel-outermost order, notes: machine-baselines §8); A is stored
  transposed, (N*OH*OW, R), and the output comes out channels-last, with no transpose.
* batch-innermost (CHWN), columns (i, j, n): runs of OW*N values, for when the NHWC runs
  are short (``batch_innermost``); A is stored (R, OH*OW*N).

Passes, each computed in the order A is stored:

* forward:         B = F A       (B^T = A^T F^T for NHWC)
* weight gradient: dF = dB A^T   (dB: dy arranged like A's columns)
* input gradient:  dA = F^T dB, then col2im: every column of dA is added back onto the
  pixels it came from, one strided add per kernel offset (u, v); at stride 1, when it is
  not larger, a forward pass of dy with the flipped kernel instead (one gather).

The batch runs in chunks (``minidl/chunks.py``) so that a chunk's columns are still
in cache for its GEMM; when the columns are large (``chunk_threads``) the chunks run on
the threads of ``minidl/parallel.py``, each into its own part of the result. The weight
gradient adds the chunks' products in chunk order: the bits do not depend on the threads.
``keep=True`` keeps every chunk's columns for the weight gradient.
Multiplies: N*K*C*KH*KW*OH*OW, as direct (Table 6).
"""

from ..backend import empty, get_array_module
from ..chunks import batch_chunks, chunk_threads
from ..parallel import parallel_for, sum_in_order
from .base import ConvAlgorithm
from .layout import contiguous, contiguous_copy, flipped_kernel, nhwc_rows, windows

COLUMNS, OUTPUT, INPUT_GRADIENT = "im2col columns", "im2col output", "im2col input gradient"


def pooled_matmul(a, b):
    """a @ b into a pooled buffer (``backend.empty``)."""
    xp = get_array_module(a)
    return xp.matmul(a, b, out=empty((a.shape[0], b.shape[1]), a.dtype, xp, "im2col product"))


def weight_matrix(w):
    """F (K, KH*KW*C) with columns in the (u, v, c) order of A's rows."""
    return contiguous(w.transpose(0, 2, 3, 1)).reshape(w.shape[0], -1)


def batch_innermost(geom, n, scatter=False):
    """True when CHWN is the better layout for a chunk of n images: when the NHWC runs of KW*C
    values (C for col2im) are short (< 16) and the CHWN runs of OW*n longer (2-4x faster on
    LeNet's conv1 gather, 5 against 1792, and conv2's col2im, 6 against 640)."""
    nhwc_run = geom.in_channels * (1 if scatter or geom.dilation[1] != 1 else geom.kernel_w)
    chwn_run = n * (geom.out_w if geom.stride[1] == 1 else 1)
    return nhwc_run < 16 and chwn_run > nhwc_run


def columns(x, geom, buffer, last):
    """The column matrix A (KH*KW*C, n*OH*OW) of x (n, C, H, W), stored in ``buffer`` (1-D);
    columns ordered (i, j, n) when ``last`` (batch innermost), else (n, i, j)."""
    view = windows(x, geom, batch_last=last)
    if last:
        view = view.transpose(3, 4, 0, 1, 2, 5)  # (u, v, c, i, j, n)
    out = buffer[: view.size].reshape(view.shape)
    out[...] = view
    return out.reshape(row_length(geom), -1) if last else out.reshape(-1, row_length(geom)).T


def output_rows(dy):
    """dy (n, K, OH, OW) as dB (K, n*OH*OW) with columns (i, j, n), for batch-innermost A: a
    view when dy is batch-innermost in memory (as this algorithm's outputs are), else a copy."""
    n, k = dy.shape[:2]
    return contiguous(dy.reshape(n, k, -1).transpose(1, 2, 0)).reshape(k, -1)


def column_blocks(count, k, r, block=4096):
    """Column slices for a long, thin product (K x R by R x count): when ``count`` dwarfs K*R
    (LeNet conv1: 6 x 25 by 25 x 50176), blocks that stay in the L2 cache run ~3x faster."""
    step = block if count > 8 * k * r else count
    return [slice(start, start + step) for start in range(0, count, step)]


def row_length(geom):
    """R = KH*KW*C, the rows of A."""
    return geom.kernel_h * geom.kernel_w * geom.in_channels


def _chunks(geom, like):
    per_image = geom.out_h * geom.out_w * row_length(geom)
    return batch_chunks(geom.batch, per_image * like.itemsize, like)


def _for_chunks(fn, parts, geom, like):
    """``parallel_for`` over the batch's chunks, on threads when the columns are large."""
    per_image = geom.out_h * geom.out_w * row_length(geom) * like.itemsize
    return parallel_for(fn, parts, chunk_threads(geom.batch, per_image))


class Im2col(ConvAlgorithm):
    """Unroll + GEMM; supports every stride, padding, dilation and kernel size."""

    name = "im2col"
    reuses = frozenset({"backward_weight"})  # the column matrices

    def forward(self, x, w, geom, keep=False):
        """y in NHWC memory (an NCHW view) for channel-innermost A, NCHW for batch-innermost.

        The chunks run on ``parallel_for``'s threads, each gathering its own columns and
        writing its own rows (or columns) of y."""
        xp = get_array_module(x)
        n, k, p, r = geom.batch, geom.out_channels, geom.out_h * geom.out_w, row_length(geom)
        f = weight_matrix(w)
        parts = _chunks(geom, x)
        last = batch_innermost(geom, parts[0].stop)  # one layout for every chunk
        whole = empty(n * p * r, x.dtype, xp, COLUMNS) if keep else None

        def gather(part):
            """A of the chunk: in its own place in ``whole`` when kept, else a pooled buffer."""
            size = (part.stop - part.start) * p * r
            own = whole[part.start * p * r :] if keep else empty(size, x.dtype, xp, COLUMNS)
            return columns(x[part], geom, own, last)

        if last:  # B = F A, columns (i, j, n): y is batch-innermost in memory, an NCHW view
            y = empty((k, p, n), x.dtype, xp, OUTPUT)

            def forward_chunk(part):
                a = gather(part)
                b = y.reshape(k, -1) if len(parts) == 1 else empty((k, a.shape[1]), x.dtype, xp)
                for cols in column_blocks(a.shape[1], k, r):
                    xp.matmul(f, a[:, cols], out=b[:, cols])
                if len(parts) > 1:
                    y[:, :, part] = b.reshape(k, p, -1)
                return (part, a) if keep else None  # unkept columns go back to the pool

            saved = _for_chunks(forward_chunk, parts, geom, x)
            y = y.reshape(k, geom.out_h, geom.out_w, n).transpose(3, 0, 1, 2)
            return y, (saved if keep else None)
        f_t = f.T.copy()
        y = empty((n * p, k), x.dtype, xp, OUTPUT)  # B^T = A^T F^T, rows (n, i, j): NHWC

        def forward_rows(part):
            xp.matmul(gather(part).T, f_t, out=y[part.start * p : part.stop * p])

        _for_chunks(forward_rows, parts, geom, x)
        if keep:  # the chunks' NHWC columns are consecutive: one matrix, one GEMM later
            saved = [(slice(0, n), whole.reshape(n * p, -1).T)]
        y = y.reshape(n, geom.out_h, geom.out_w, k).transpose(0, 3, 1, 2)
        return y, (saved if keep else None)

    def backward_weight(self, dy, x, geom, saved=None):
        """dF summed over the batch: one product per chunk (or per kept matrix), on
        ``parallel_for``'s threads, then added in chunk order (``sum_in_order``)."""
        xp = get_array_module(dy)
        k, r, p = geom.out_channels, row_length(geom), geom.out_h * geom.out_w
        parts = _chunks(geom, dy)
        last = batch_innermost(geom, parts[0].stop)  # the forward's layout
        dy_rows = None if last else nhwc_rows(dy)

        def product(item):
            """This chunk's share of dF^T = A dB^T (R x K): OpenBLAS runs this orientation
            ~1.7x faster than dF = dB A^T when the shared dimension (the positions) is long."""
            part, a = item
            if a is None:
                size = (part.stop - part.start) * p * r
                a = columns(x[part], geom, empty(size, dy.dtype, xp, COLUMNS), last)
            if not last:  # dB^T = dy in NHWC rows
                return a @ dy_rows[part.start * p : part.stop * p]
            db = output_rows(dy[part])
            blocks = [a[:, cols] @ db[:, cols].T for cols in column_blocks(a.shape[1], k, r)]
            return sum_in_order(blocks)

        items = saved or [(part, None) for part in parts]
        dw_t = sum_in_order(_for_chunks(product, items, geom, dy))
        shape = (geom.kernel_h, geom.kernel_w, geom.in_channels, k)
        return contiguous_copy(dw_t.reshape(shape).transpose(3, 2, 0, 1))

    def backward_input(self, dy, w, geom, saved=None):
        """dx in the memory layout of the columns: NHWC (an NCHW view) or NCHW; each chunk
        of images on ``parallel_for``'s threads, into its own part of dx.

        At stride 1, when its column matrix (H*W*K per image) is not larger than col2im's
        (OH*OW*C), a forward pass of dy with the flipped kernel (``ConvGeometry.transposed``).
        """
        (n, c, h, wd), (k, p) = geom.input_shape, (geom.out_channels, geom.out_h * geom.out_w)
        if geom.stride == (1, 1) and h * wd * k <= p * c:
            return self.forward(dy, flipped_kernel(w), geom.transposed())[0]
        xp = get_array_module(dy)
        f = weight_matrix(w)
        parts = _chunks(geom, dy)
        kernel, out = (geom.kernel_h, geom.kernel_w), (geom.out_h, geom.out_w)
        if batch_innermost(geom, parts[0].stop, scatter=True):  # dx batch-innermost in memory
            dx = empty((c, h, wd, n), dy.dtype, xp, INPUT_GRADIENT)

            def scatter_columns(part):
                blocks = pooled_matmul(f.T, output_rows(dy[part])).reshape(*kernel, c, *out, -1)
                dx[..., part] = crop_padding(col2im(blocks, geom), geom)

            _for_chunks(scatter_columns, parts, geom, dy)
            return dx.transpose(3, 0, 1, 2)
        dy_rows = nhwc_rows(dy)
        acc = empty((n, *geom.padded_size, c), dy.dtype, xp, INPUT_GRADIENT)

        def scatter_rows(part):  # dA^T = dB^T F, rows (n, i, j)
            da_t = pooled_matmul(dy_rows[part.start * p : part.stop * p], f)
            da_t = da_t.reshape(-1, *out, *kernel, c)
            col2im(da_t.transpose(3, 4, 0, 1, 2, 5), geom, out=acc[part])

        _for_chunks(scatter_rows, parts, geom, dy)
        return crop_padding(acc, geom).transpose(0, 3, 1, 2)

    def multiplies(self, geom):
        return {"gemm": geom.direct_multiplies()}

    def workspace_elements(self, geom, pass_, chunk):
        n, c, h, w = geom.input_shape
        p, r = geom.out_h * geom.out_w, row_length(geom)
        images = chunk(n, p * r)  # as ``_chunks`` splits the batch
        padded = images * c * geom.padded_size[0] * geom.padded_size[1]
        cols = images * p * r  # one chunk of columns
        outputs = 2 * images * geom.out_channels * p  # GEMM result before its NCHW copy
        extra = {
            "forward": outputs,
            "backward_weight": outputs + geom.out_channels * r,
            "backward_input": outputs + cols + images * c * h * w,  # dA + col2im
        }[pass_]
        return padded + cols + extra + geom.out_channels * r

    def saved_elements(self, geom):
        return geom.batch * geom.out_h * geom.out_w * row_length(geom)


def col2im(blocks, geom, out=None):
    """Add the columns back onto the padded input: blocks (KH, KW, A, OH, OW, B) -> (A, H', W', B).

    ``blocks[u, v]`` holds kernel offset (u, v)'s columns; (A, B) is (n, C) for NHWC columns
    or (C, n) for batch-innermost ones. Returns the accumulator ``out`` (zeroed here).
    """
    if out is None:
        shape = (blocks.shape[2], *geom.padded_size, blocks.shape[5])
        out = empty(shape, blocks.dtype, get_array_module(blocks), INPUT_GRADIENT)
    out[...] = 0
    for u in range(geom.kernel_h):
        for v in range(geom.kernel_w):
            rows, cols = geom.window(u, v)
            out[:, rows, cols] += blocks[u, v]
    return out


def crop_padding(acc, geom):
    """The unpadded (A, H, W, B) view of a padded accumulator."""
    ph, pw = geom.padding
    return acc[:, ph : ph + geom.height, pw : pw + geom.width]


IM2COL = Im2col()
