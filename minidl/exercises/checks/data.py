"""Checks of the data exercises (13.x): AlexNet's colour PCA and noise, and top-k error.

Oracles that run no exercise region, evaluated before the student's code:
the tuned colour statistics (``minidl.data.colour``: pixel moments summed
image by image, then one 3x3 eigendecomposition), the tuned noise offset
(``minidl.data.imageprep.pca_noise``, alpha drawn with the library's
``PCA_STD``) and the tuned top-k count (``minidl.train.loop.top_k_hits``).
Eigenvectors are compared up to their sign, which no method fixes.
"""

import numpy as np

from minidl.data import colour as tuned_colour
from minidl.data.colour import pixel_moments, stats_from_moments
from minidl.data.imageprep import PCA_STD, pca_noise
from minidl.exercises import exercise, expect_close, expect_true
from minidl.exercises.checks.tuned import call_leaving, forbids
from minidl.reference.data import colour as reference
from minidl.train.loop import top_k_hits

WHY = "the images, scores and labels are read again by the next epoch and other metrics"

PATH = "minidl/reference/data/colour.py"


def images(rng, sizes):
    """Seeded HWC uint8 RGB images of these (height, width), with correlated channels."""
    found = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    for image in found:
        image[..., 2] = image[..., 0] // 2 + image[..., 2] // 2
    return found


def compare_colour_pca(rng, sizes):
    """``colour_pca`` of seeded images against the tuned moments; returns the tuned stats."""
    given = images(rng, sizes)
    moments = [pixel_moments(image) for image in given]
    tuned = stats_from_moments(*(sum(m[i] for m in moments) for i in range(3)), len(given))
    what = f"colour PCA of {len(given)} images of sizes {sizes}"
    got = call_leaving(what, reference.colour_pca, {"images": given}, WHY)
    expect_true(
        f"{what}: returns (mean, eigenvalues, eigenvectors)",
        isinstance(got, tuple) and len(got) == 3,
        detail=f"got {type(got).__name__}",
    )
    mean, values, vectors = got
    expect_close(f"{what}: mean", mean, tuned.mean, rtol=1e-12)
    expect_close(
        f"{what}: eigenvalues, largest first", values, tuned.eigenvalues, rtol=1e-9, atol=1e-9
    )
    vectors = np.asarray(vectors, dtype=np.float64)
    expect_true(f"{what}: eigenvectors of shape (3, 3)", vectors.shape == (3, 3))
    signs = np.where((vectors * tuned.eigenvectors).sum(axis=0) < 0, -1.0, 1.0)
    expect_close(
        f"{what}: eigenvectors (columns, each up to its sign)",
        vectors * signs,
        tuned.eigenvectors,
        atol=1e-8,
    )
    return tuned


def compare_lighting(rng, stats, height, width):
    """``pca_lighting`` of a seeded CHW image with alpha ~ N(0, PCA_STD) against the tuned
    offset added to every pixel."""
    image = rng.integers(0, 256, (3, height, width)).astype(np.uint8)
    alpha = rng.normal(0.0, PCA_STD, size=3)
    offset = pca_noise(stats.eigenvalues, stats.eigenvectors, alpha)
    expected = image.astype(np.float64) + offset[:, None, None]
    inputs = {
        "image": image,
        "eigenvalues": stats.eigenvalues.copy(),
        "eigenvectors": stats.eigenvectors.copy(),
        "alpha": alpha,
    }
    got = call_leaving(
        f"colour noise on a {image.shape} image", reference.pca_lighting, inputs, WHY
    )
    expect_close(
        f"colour noise on a {image.shape} image, alpha {np.round(alpha, 4).tolist()}",
        got,
        expected,
        rtol=1e-12,
        atol=1e-9,
    )


@exercise(
    "13.1",
    "Colour PCA of the training pixels and AlexNet's colour noise",
    path=PATH,
    hint="centre the pixels, cov = centred^T centred / n, np.linalg.eigh then sort largest "
    "first; the noise adds alpha_i sqrt(lambda_i) p_i (p_i the i-th column) to every pixel",
)
@forbids(tuned_colour, pca_noise, name="minidl's tuned colour statistics")
def check_colour_pca():
    rng = np.random.default_rng(131)
    stats = compare_colour_pca(rng, ((5, 7), (9, 4), (3, 3)))
    compare_lighting(rng, stats, 4, 6)


def compare_top_k(rng, rows, classes, ks):
    """``top_k_error`` of seeded scores (no ties) against the tuned top-k count, for each k;
    the label's score is raised by a random amount, so that its rank varies from first to last
    (with scores alone, the k lowest would miss about as often as the k highest)."""
    scores, labels = rng.standard_normal((rows, classes)), rng.integers(0, classes, rows)
    scores[np.arange(rows), labels] += 2.0 * rng.random(rows)
    for k in ks:
        expected = 1 - top_k_hits(scores, labels, k) / rows
        what = f"top-{k} error of ({rows}, {classes}) scores"
        got = call_leaving(
            what, reference.top_k_error, {"scores": scores, "labels": labels}, WHY, k=k
        )
        expect_close(what, np.float64(got), np.float64(expected), rtol=1e-12, atol=1e-12)


@exercise(
    "13.2",
    "Top-k error: the label is not among the k highest scores",
    path=PATH,
    hint="for each row take the indices of its k largest scores and count a miss when the "
    "label is not one of them; divide by the number of rows",
)
@forbids(top_k_hits, name="minidl's tuned top_k_hits")
def check_top_k_error():
    compare_top_k(np.random.default_rng(132), rows=40, classes=9, ks=(1, 3, 5, 9))
