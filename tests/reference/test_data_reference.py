"""The textbook colour PCA, colour noise and top-k error against the tuned data pipeline."""

import numpy as np

from minidl.data import Preparation
from minidl.data.colour import pixel_moments, stats_from_moments
from minidl.reference.data import colour_pca, pca_lighting, top_k_error
from minidl.train.loop import top_k_hits


def test_colour_pca_from_moments_equals_the_centred_covariance():
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((5, 7), (9, 4))]
    images[1][..., 2] = images[1][..., 0] // 2  # correlated channels
    mean, values, vectors = colour_pca(images)
    moments = [pixel_moments(image) for image in images]
    tuned = stats_from_moments(*(sum(m[i] for m in moments) for i in range(3)), len(images))
    np.testing.assert_allclose(tuned.mean, mean, rtol=1e-13)
    np.testing.assert_allclose(tuned.eigenvalues, values, rtol=1e-10)
    signs = np.sign((tuned.eigenvectors * vectors).sum(axis=0))  # each vector up to its sign
    np.testing.assert_allclose(tuned.eigenvectors * signs, vectors, atol=1e-10)


def test_preparation_adds_the_reference_colour_noise():
    values = np.array([900.0, 40.0, 4.0])
    vectors = np.linalg.qr(np.array([[1.0, 2, 0], [0, 1, 3], [1, 0, 1]]))[0]
    prep = Preparation(True, crop=4, resize=4, eigenvalues=values, eigenvectors=vectors)
    patch = np.random.default_rng(1).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    image = prep(patch, np.random.default_rng(2))
    # replay the draws: crop offsets (0, 0 for a 4x4 crop of 4x4), the flip, then alpha
    replay = np.random.default_rng(2)
    replay.integers(0, 1, size=2)
    flipped = replay.random() < 0.5
    alpha = replay.normal(0.0, 0.1, size=3)
    plain = patch.transpose(2, 0, 1)[:, :, ::-1] if flipped else patch.transpose(2, 0, 1)
    np.testing.assert_allclose(image, pca_lighting(plain, values, vectors, alpha), rtol=1e-5)


def test_top_k_error_equals_the_tuned_count():
    rng = np.random.default_rng(3)
    scores, labels = rng.normal(size=(60, 9)), rng.integers(0, 9, 60)
    for k in (1, 5):
        assert top_k_error(scores, labels, k) == 1 - top_k_hits(scores, labels, k) / 60
