"""Textbook convolution algorithms: direct, im2col, FFT and Winograd F(2x2, 3x3), one per file.

Each is a ``minidl.conv.base.ConvAlgorithm`` for one group (the dispatcher in
``minidl/conv/function.py`` loops over groups and adds the bias) and
computes the output and both gradients from its formula. They are
registered in ``minidl.conv.registry`` under their own names
(``algo="direct"``, ``"im2col_reference"``, ``"fft_reference"``,
``"winograd_reference"``); the tuned twins in ``minidl/conv/`` compute the
same functions faster.
"""
from .direct import DIRECT
from .fft import FFT_REFERENCE
from .im2col import IM2COL_REFERENCE
from .winograd import WINOGRAD_REFERENCE

__all__ = ["DIRECT", "IM2COL_REFERENCE", "FFT_REFERENCE", "WINOGRAD_REFERENCE"]
