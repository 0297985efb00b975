"""The reference tier: short textbook implementations, one concept per file, for reading
and exercises.

Everything minidl computes has a plain version here that follows its formula
and its source line by line, with no layout tricks, chunking or caching.
The tuned implementations elsewhere in minidl (``minidl/conv/im2col.py``,
``minidl/functional/normalization.py``, ``minidl/dist/collectives.py``...)
compute the same functions faster; tests hold each reference against float64
oracles and against its tuned twin. Where both are selectable, the reference
is registered under its own name (``algo="im2col_reference"``,
``allreduce(..., algorithm="ring_reference")``); ``auto`` never needs it.
Importing this package registers the convolutions and the allreduce
algorithms; the library never imports it.

Layout (mirrors the package)::

    autograd.py          reverse-mode differentiation on a small graph
    recompute.py         activation recomputation over segments of a chain of layers
    functional/          layer forward and backward formulas
    conv/                direct, im2col, FFT and Winograd convolution
    optim/               the six update rules
    perf/                work and depth, the alpha-beta cost model, scaling
    dist/                allreduce algorithms, gradient buckets, SSP, parameter
                         server, model averaging and EASGD, compression,
                         pipeline schedules (GPipe, 1F1B) and their bubble
    data/                AlexNet's colour PCA and colour noise, top-k error

The regions between ``# BEGIN EXERCISE x.y`` and ``# END EXERCISE x.y`` are
the course's exercises (``minidl exercise list``).
"""

from . import conv, dist  # noqa: F401 (registers the textbook convolutions and allreduces)
