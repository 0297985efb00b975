"""FFT convolution, pointwise in the Fourier domain (Mathieu et al. 2014; Vasilache et al. 2015).

Ben-Nun & Hoefler 2019, §4.3 / App. B.3: y[n, k] = IFFT( sum_c FFT(x[n, c]) o conj(FFT(w[k, c])) ).
The conjugate makes it a cross-correlation (Eq. 2 has no kernel flip). With the padded input
of size Hp x Wp and an FFT size L >= Hp, the circular correlation equals the linear one on
the Hp - KH + 1 valid outputs; the rest is cropped. At every frequency the channel sum is
a complex matrix product: one batched GEMM, (N x C) @ (C x K) per frequency.

* stride s: the stride-1 output, subsampled ``[::s, ::s]`` (the work does not shrink); the
  input gradient zero-inserts dy back to the stride-1 grid first.
* dilation d: the kernel is dilated before its FFT; the weight gradient is read at the taps.
* input gradient: a full convolution, dX = IFFT( sum_k FFT(dy[n, k]) o FFT(w[k, c]) ).
* weight gradient: a correlation of x with dy,
  dW = IFFT( sum_n conj(FFT(dy[n, k])) o FFT(x[n, c]) ).

The FFTs are pruned (Zlateski et al. 2016): the first 1-D pass transforms only the rows that
hold data, the inverse only the rows that are kept. The arrays are transformed spatial axes
first, (H, W, N, C), so the spectra come out frequency-major for the GEMM (a transpose of
the kernel spectra cost 77 ms of 144 on AlexNet conv2). scipy.fft (all cores) on CPU,
cupyx.scipy.fft on GPU. Best for large kernels: the work does not grow with KH*KW.
"""

import numpy as np

from ..backend import get_array_module
from .base import ConvAlgorithm
from .layout import HWNC, contiguous_copy, padded, symmetric_pads

OUTPUT = "fft conv result"


def _fft_module(xp):
    """(scipy-like fft module, extra keyword arguments) for NumPy or CuPy arrays."""
    if xp is np:
        import scipy.fft

        return scipy.fft, {"workers": -1}
    import cupyx.scipy.fft

    return cupyx.scipy.fft, {}


def fast_length(n):
    """The smallest length >= n that the FFT library computes quickly (2^a 3^b 5^c ...)."""
    import scipy.fft

    return scipy.fft.next_fast_len(n, real=True)


def spatial_first(a, pads=(0, 0, 0, 0)):
    """(A, B, H, W) -> (t+H+b, l+W+r, A, B), zero-padded (negative pads crop): the 2-D FFT's
    output is then frequency-major, (F, A, B), one matrix per frequency, with no transpose."""
    return padded(a, pads, HWNC)


def rfft2_padded(a, size):
    """2-D real FFT over the first two axes, zero-padded to ``size``: (Lh*(Lw/2+1), A, B)."""
    fft, kw = _fft_module(get_array_module(a))
    rows = fft.rfft(a, n=size[1], axis=1, **kw)
    spectra = fft.fft(rows, n=size[0], axis=0, overwrite_x=True, **kw)
    return spectra.reshape((-1,) + spectra.shape[2:])


def irfft2_cropped(spectra, size, rows, cols):
    """Inverse of ``rfft2_padded``, keeping only ``[rows, cols]``: (A, B, rows, cols) real."""
    fft, kw = _fft_module(get_array_module(spectra))
    grid = spectra.reshape((size[0], size[1] // 2 + 1) + spectra.shape[1:])
    kept = fft.ifft(grid, axis=0, **kw)[rows]
    real = fft.irfft(kept, n=size[1], axis=1, overwrite_x=True, **kw)[:, cols]
    return real.transpose(2, 3, 0, 1)


def stride_one_size(geom):
    """The stride-1 output grid over the padded input: (Hp - KHd + 1, Wp - KWd + 1)."""
    return tuple(p - k + 1 for p, k in zip(geom.padded_size, geom.dilated_kernel))


def stride_one_grid(dy, geom):
    """dy (N, K, OH, OW) put back on the stride-1 output grid, zeros between strided outputs."""
    if geom.stride == (1, 1):
        return dy
    xp = get_array_module(dy)
    out = xp.zeros(dy.shape[:2] + stride_one_size(geom), dtype=dy.dtype)
    out[:, :, :: geom.stride[0], :: geom.stride[1]] = dy
    return out


def dilate_kernel(w, dilation):
    """w (K, C, KH, KW) with d-1 zeros between taps: (K, C, d*(KH-1)+1, d*(KW-1)+1)."""
    dh, dw = dilation
    if (dh, dw) == (1, 1):
        return w
    xp = get_array_module(w)
    k, c, kh, kw = w.shape
    out = xp.zeros((k, c, dh * (kh - 1) + 1, dw * (kw - 1) + 1), dtype=w.dtype)
    out[:, :, ::dh, ::dw] = w
    return out


def fft_size(geom):
    """The FFT size: a fast length >= the padded input, per axis."""
    return tuple(fast_length(p) for p in geom.padded_size)


def frequencies(size):
    """Frequencies of a real 2-D FFT of ``size``: Lh*(Lw/2+1)."""
    return size[0] * (size[1] // 2 + 1)


class FFT(ConvAlgorithm):
    """Fourier-domain convolution; any kernel size, stride (by subsampling) and dilation."""

    name = "fft"
    reuses = frozenset({"backward_input", "backward_weight"})  # kernel and input spectra

    def _input_spectra(self, x, geom, size):
        """Spectra of the padded input: (F, N, C)."""
        return rfft2_padded(spatial_first(x, symmetric_pads(geom)), size)

    def _conjugate_weight_spectra(self, w, geom, size):
        """conj(FFT(w)) of the (dilated) kernel: (F, K, C)."""
        xp = get_array_module(w)
        w_f = rfft2_padded(spatial_first(dilate_kernel(w, geom.dilation)), size)
        return xp.conj(w_f, out=w_f)

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        size, out1 = fft_size(geom), stride_one_size(geom)
        (sh, sw) = geom.stride
        x_f = self._input_spectra(x, geom, size)
        w_c = self._conjugate_weight_spectra(w, geom, size)
        y_f = xp.matmul(x_f, w_c.transpose(0, 2, 1))  # (F, N, K)
        y = irfft2_cropped(y_f, size, slice(0, out1[0], sh), slice(0, out1[1], sw))
        return contiguous_copy(y, x.dtype, OUTPUT), ((x_f, w_c) if keep else None)

    def _gradient_spectra(self, dy, geom, size):
        """dy on the stride-1 output grid (zeros between strided samples), as (F, N, K) spectra."""
        return rfft2_padded(spatial_first(stride_one_grid(dy, geom)), size)

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        size = fft_size(geom)
        w_c = self._conjugate_weight_spectra(w, geom, size) if saved is None else saved[1]
        dy_f = self._gradient_spectra(dy, geom, size)
        # dX = dY o FFT(w) = conj(conj(dY) o conj(FFT(w))): conjugates of batch-sized arrays only
        dx_f = xp.matmul(xp.conj(dy_f, out=dy_f), w_c)  # (F, N, C)
        ph, pw = geom.padding
        dx = irfft2_cropped(
            xp.conj(dx_f, out=dx_f), size, slice(ph, ph + geom.height), slice(pw, pw + geom.width)
        )
        return contiguous_copy(dx, dy.dtype, OUTPUT)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        kernel, size = geom.dilated_kernel, fft_size(geom)
        x_f = self._input_spectra(x, geom, size) if saved is None else saved[0]
        dy_f = self._gradient_spectra(dy, geom, size)
        dw_f = xp.matmul(xp.conj(dy_f, out=dy_f).transpose(0, 2, 1), x_f)  # (F, K, C)
        dh, dw = geom.dilation
        grad = irfft2_cropped(dw_f, size, slice(0, kernel[0], dh), slice(0, kernel[1], dw))
        return contiguous_copy(grad, dy.dtype, OUTPUT)

    def multiplies(self, geom):
        size, n, k, c = fft_size(geom), geom.batch, geom.out_channels, geom.in_channels
        freqs, points = frequencies(size), size[0] * size[1]
        # estimate: L*log2(L) real multiplies per real 2-D FFT of L points (half a radix-2
        # complex FFT); transforms of x (N*C), w (K*C) and the inverse of y (N*K).
        transforms = int(points * np.log2(points)) * (n * c + k * c + n * k)
        return {"pointwise": 4 * freqs * n * k * c, "transforms": transforms}

    def workspace_elements(self, geom, pass_, chunk):
        freqs, (hp, wp) = frequencies(fft_size(geom)), geom.padded_size
        n, k, c = geom.batch, geom.out_channels, geom.in_channels
        # every pass transforms x (or dx), w and y (or dy): complex spectra, twice (library
        # output and the frequency-major copy), plus the padded input
        return 2 * 2 * freqs * (n * c + k * c + n * k) + n * c * hp * wp

    def saved_elements(self, geom):  # the spectra of x and w
        freqs, n, k = frequencies(fft_size(geom)), geom.batch, geom.out_channels
        return 2 * freqs * geom.in_channels * (n + k)


FFT_ALGORITHM = FFT()
