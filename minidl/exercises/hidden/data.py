"""Hidden checks of the data exercises: more and larger images, other classes and k."""

import numpy as np

from .. import hidden_check
from ..checks.data import compare_colour_pca, compare_lighting, compare_top_k


@hidden_check("13.1", "six images, one of a single pixel, a wide noisy image")
def colour_pca_many():
    rng = np.random.default_rng(1301)
    stats = compare_colour_pca(rng, ((1, 1), (8, 3), (6, 11), (2, 2), (12, 5), (7, 7)))
    compare_lighting(rng, stats, 3, 17)


@hidden_check("13.2", "1000 classes, 64 rows, k 1, 5 and 1000")
def top_k_many_classes():
    compare_top_k(np.random.default_rng(1302), rows=64, classes=1000, ks=(1, 5, 1000))
