"""AlexNet's colour augmentation and its top-k error, written out (Krizhevsky et al. 2012).

Colour PCA (Sec. 4.1): over all RGB pixel values ``x`` of the training set,
``mean = (1/n) sum x``, ``cov = (1/n) sum (x - mean)(x - mean)^T``, and
``cov p_i = lambda_i p_i`` with ``lambda_1 >= lambda_2 >= lambda_3``. Each
time an image is used, draw ``alpha_i ~ N(0, 0.1)`` and add
``sum_i alpha_i sqrt(lambda_i) p_i`` to every pixel (the square root: see
``minidl.data.imageprep``, step 5). Top-k error (Sec. 6): the fraction of
images whose label is not among the k classes with the highest scores.
The tuned versions: ``minidl.data.colour`` (moments summed image by image)
and ``minidl.data.imageprep.Preparation``; ``minidl.train.loop.top_k_hits``.

An exercise region here must not call the tuned colour statistics and top-k
(``minidl.data.colour``, ``pca_noise``, ``top_k_hits``): the check fails one that does,
since the exercise is to write the algorithm out.
"""

import numpy as np


def colour_pca(images):
    """(mean (3,), eigenvalues (3,) decreasing, eigenvectors (3, 3) as columns) of the pixels
    of ``images`` (a list of HWC RGB arrays)."""
    pixels = np.concatenate([image.reshape(-1, 3) for image in images]).astype(np.float64)
    # BEGIN EXERCISE 13.1
    mean = pixels.mean(axis=0)
    centred = pixels - mean
    cov = centred.T @ centred / len(pixels)
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1]
    return mean, values[order], vectors[:, order]
    # END EXERCISE 13.1


def pca_lighting(image, eigenvalues, eigenvectors, alpha):
    """``image`` (CHW) with ``sum_i alpha_i sqrt(lambda_i) p_i`` added to every pixel."""
    out = image.astype(np.float64)
    # BEGIN EXERCISE 13.1
    for i in range(3):
        shift = alpha[i] * np.sqrt(eigenvalues[i]) * eigenvectors[:, i]
        for channel in range(3):
            out[channel] += shift[channel]
    return out
    # END EXERCISE 13.1


def top_k_error(scores, labels, k=5):
    """The fraction of rows of ``scores`` whose label is not among their ``k`` best."""
    # BEGIN EXERCISE 13.2
    misses = 0
    for row, label in zip(scores, labels):
        best = sorted(range(len(row)), key=lambda c: -row[c])[:k]
        misses += label not in best
    return misses / len(labels)
    # END EXERCISE 13.2
