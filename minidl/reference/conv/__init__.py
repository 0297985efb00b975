"""Textbook convolution algorithms: direct, im2col, FFT and Winograd F(2x2, 3x3), one per file.

Each is a ``minidl.conv.base.ConvAlgorithm`` for one group (the dispatcher in
``minidl/conv/function.py`` loops over groups and adds the bias) and
computes the output and both gradients from its formula. Importing this
package registers them in ``minidl.conv.registry`` under their own names
(``algo="direct_reference"``, ``"im2col_reference"``, ``"fft_reference"``,
``"winograd_reference"``): a student selects one by name, and ``auto`` never
considers them. The tuned twins in ``minidl/conv/`` compute the same
functions faster.
"""

from ...conv.registry import register
from .direct import DIRECT_REFERENCE
from .fft import FFT_REFERENCE
from .im2col import IM2COL_REFERENCE
from .winograd import WINOGRAD_REFERENCE

REFERENCE_ALGORITHMS = (DIRECT_REFERENCE, IM2COL_REFERENCE, FFT_REFERENCE, WINOGRAD_REFERENCE)
register(*REFERENCE_ALGORITHMS)

__all__ = [
    "DIRECT_REFERENCE",
    "IM2COL_REFERENCE",
    "FFT_REFERENCE",
    "WINOGRAD_REFERENCE",
    "REFERENCE_ALGORITHMS",
]
