"""FFT convolution: the convolution theorem (Mathieu et al. 2014; Vasilache et al. 2015).

Ben-Nun & Hoefler 2019, Demystifying Parallel and Distributed Deep Learning,
§4.3 / App. B.3: y[n, k] = IFFT( sum_c FFT(x[n, c]) o FFT(w[k, c]) ). With F
the 2-D DFT of size L (here the padded input size, Hp x Wp) and * the complex
conjugate, the theorem for real arrays a and b reads

    circular convolution   sum_t a[p - t] b[t]     has DFT  F(a) o F(b)
    circular correlation   sum_i a[i + t] b[i]     has DFT  F(a) o F(b)*

Eq. 2 is a cross-correlation, so the kernel's spectrum is conjugated (the
same as flipping the kernel). All three passes work on the padded input
xpad (Hp x Wp), the kernel wd dilated by d (zeros between taps, KHd =
d*(KH - 1) + 1) and the stride-1 output grid (Hp - KHd + 1 rows); arrays are
zero-padded to L = Hp x Wp before their DFT:

* forward:  y1[n, k] = IFFT( sum_c F(xpad[n, c]) o F(wd[k, c])* ), kept on
  its first Hp - KHd + 1 rows and columns (the valid outputs: i + t <= Hp - 1,
  so no term wraps around), then subsampled by the stride: y = y1[::s, ::s].
* input gradient: dy1 is dy put back on the stride-1 grid (zeros between);
  dxpad[n, c, p] = sum_{k, i + t = p} dy1[n, k, i] wd[k, c, t] is a full
  convolution, of length (Hp - KHd + 1) + KHd - 1 = Hp <= L (no wrap):
  dxpad[n, c] = IFFT( sum_k F(dy1[n, k]) o F(wd[k, c]) ), then crop p.
* weight gradient: dwd[k, c, t] = sum_{n, i} dy1[n, k, i] xpad[n, c, i + t]
  is the correlation of xpad with dy1 (i + t <= Hp - 1, no wrap):
  dwd[k, c] = IFFT( sum_n F(xpad[n, c]) o F(dy1[n, k])* ), read at the taps
  t = 0, d, 2d, ...

The channel (or batch) sums are products of spectra summed pointwise at
every frequency. Real FFTs (rfft2) keep the Lh*(Lw/2 + 1) frequencies that a
real array's spectrum does not repeat.

An exercise region here must not call the tuned convolutions (``minidl.conv``,
``minidl.functional.conv``): the check fails one that does, since the exercise is to write
the algorithm out.
"""

import numpy as np

from ...backend import get_array_module
from ...conv.base import ConvAlgorithm
from ...conv.fft import dilate_kernel, stride_one_grid, stride_one_size
from ...conv.layout import padded_nchw, symmetric_pads


def _padded(x, geom):
    return padded_nchw(x, symmetric_pads(geom))


class FFTReference(ConvAlgorithm):
    """The convolution theorem, pass by pass; every stride, padding, dilation and kernel size."""

    name = "fft_reference"

    def forward(self, x, w, geom, keep=False):
        xp = get_array_module(x)
        size = geom.padded_size
        # BEGIN EXERCISE 3.4
        x_f = xp.fft.rfft2(_padded(x, geom), s=size)  # (N, C, Lh, Lw/2+1)
        w_f = xp.fft.rfft2(dilate_kernel(w, geom.dilation), s=size)  # (K, C, Lh, Lw/2+1)
        y1 = xp.fft.irfft2(xp.einsum("ncab,kcab->nkab", x_f, w_f.conj()), s=size)
        y = y1[:, :, :: geom.stride[0], :: geom.stride[1]][:, :, : geom.out_h, : geom.out_w]
        return y.astype(x.dtype, copy=False), None
        # END EXERCISE 3.4

    def backward_input(self, dy, w, geom, saved=None):
        xp = get_array_module(dy)
        size = geom.padded_size
        dy_f = xp.fft.rfft2(stride_one_grid(dy, geom), s=size)
        w_f = xp.fft.rfft2(dilate_kernel(w, geom.dilation), s=size)
        dxpad = xp.fft.irfft2(xp.einsum("nkab,kcab->ncab", dy_f, w_f), s=size)
        (ph, pw), (h, wd) = geom.padding, (geom.height, geom.width)
        return dxpad[:, :, ph : ph + h, pw : pw + wd].astype(dy.dtype, copy=False)

    def backward_weight(self, dy, x, geom, saved=None):
        xp = get_array_module(dy)
        size = geom.padded_size
        x_f = xp.fft.rfft2(_padded(x, geom), s=size)
        dy_f = xp.fft.rfft2(stride_one_grid(dy, geom), s=size)
        dwd = xp.fft.irfft2(xp.einsum("ncab,nkab->kcab", x_f, dy_f.conj()), s=size)
        (dh, dw), (khd, kwd) = geom.dilation, geom.dilated_kernel
        return dwd[:, :, :khd:dh, :kwd:dw].astype(dy.dtype, copy=False)

    def multiplies(self, geom):
        """Complex products (4 real multiplies each); transforms: L*log2(L) per real FFT of
        L points."""
        hp, wp = geom.padded_size
        n, k, c = geom.batch, geom.out_channels, geom.in_channels
        points = hp * wp
        return {
            "pointwise": 4 * hp * (wp // 2 + 1) * n * k * c,
            "transforms": int(points * np.log2(points)) * (n * c + k * c + n * k),
        }

    def workspace_elements(self, geom, pass_, chunk):
        hp, wp = geom.padded_size
        n, k, c = geom.batch, geom.out_channels, geom.in_channels
        # real numbers in one rfft2, twice: each 2-D transform passes through a spectrum of
        # the same size (one axis at a time), and the conjugate is a copy
        spectrum = 2 * 2 * hp * (wp // 2 + 1)
        kernel = k * c * int(np.prod(geom.dilated_kernel))
        grid = n * k * int(np.prod(stride_one_size(geom)))
        result = {"forward": n * k, "backward_input": n * c, "backward_weight": k * c}[pass_]
        inputs = {
            "forward": n * c * hp * wp + kernel,
            "backward_input": grid + kernel,
            "backward_weight": n * c * hp * wp + grid,
        }[pass_]
        # the spatial inputs of the transforms, three spectra, the inverse's result
        return inputs + spectrum * (n * c + k * c + n * k) + result * hp * wp


FFT_REFERENCE = FFTReference()
