"""Augmentations: exact mirrors, crops that are windows of the padded input, seeded streams."""

import numpy as np
import pytest

from minidl.data import (
    ArrayDataset,
    CenterCrop,
    Compose,
    DataLoader,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
)


def batch(n=16, c=1, h=8, w=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, c, h, w)).astype(np.float32), np.arange(n)


def test_flip_p1_is_an_exact_mirror_and_p0_the_identity():
    x, y = batch()
    flipped, y_out = RandomHorizontalFlip(p=1.0)(x, y, np.random.default_rng(0))
    np.testing.assert_array_equal(flipped, x[:, :, :, ::-1])
    np.testing.assert_array_equal(y_out, y)
    same, _ = RandomHorizontalFlip(p=0.0)(x, y, np.random.default_rng(0))
    np.testing.assert_array_equal(same, x)


def test_flip_half_flips_some_images_whole():
    x, y = batch(n=64)
    out, _ = RandomHorizontalFlip()(x, y, np.random.default_rng(3))
    mirrored = [np.array_equal(o, i[:, :, ::-1]) for o, i in zip(out, x)]
    kept = [np.array_equal(o, i) for o, i in zip(out, x)]
    assert all(m != k for m, k in zip(mirrored, kept))  # each image: mirrored or untouched
    assert 16 < sum(mirrored) < 48


@pytest.mark.parametrize("size, padding", [(8, 2), (6, 0), (5, 1), (10, 1)])
def test_crop_is_a_window_of_the_padded_input(size, padding):
    x, y = batch(n=40, c=2)
    out, _ = RandomCrop(size, padding=padding)(x, y, np.random.default_rng(1))
    assert out.shape == (40, 2, size, size) and out.flags.c_contiguous
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    offsets = set()
    limit = padded.shape[-1] - size
    for i in range(len(x)):
        hits = [
            (t, l)
            for t in range(limit + 1)
            for l in range(limit + 1)
            if np.array_equal(out[i], padded[i, :, t : t + size, l : l + size])
        ]
        assert len(hits) == 1, f"image {i}: not exactly one matching window"
        offsets.add(hits[0])
    assert len(offsets) > min(5, (limit + 1) ** 2 - 1)  # offsets vary over the batch


def test_crop_fill_value_and_too_large_crop():
    x, y = batch(n=4, h=3, w=3)
    out, _ = RandomCrop(7, padding=2, fill=-9.0)(x, y, np.random.default_rng(0))
    assert (out[:, :, :2] == -9.0).all() and (out[:, :, 2:5, 2:5] == x).all()
    with pytest.raises(ValueError, match=r"RandomCrop\(8, padding=2\): padded images are only 7x7"):
        RandomCrop(8, padding=2)(x, y, np.random.default_rng(0))


def test_augmentations_are_seeded():
    x, y = batch(n=32)
    augment = Compose([RandomCrop(8, padding=2), RandomHorizontalFlip()])
    a = augment(x, y, np.random.default_rng(7))[0]
    b = augment(x, y, np.random.default_rng(7))[0]
    c = augment(x, y, np.random.default_rng(8))[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_pad_and_center_crop():
    x, y = batch(n=3, h=28, w=28)
    padded, _ = Pad(2)(x, y)
    assert padded.shape == (3, 1, 32, 32)
    np.testing.assert_array_equal(padded, np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))))
    back, _ = CenterCrop(28)(padded, y)
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(CenterCrop(4)(x, y)[0], x[:, :, 12:16, 12:16])


def test_compose_applies_in_order():
    x, y = batch(n=2, h=4, w=4)
    out, _ = Compose([Pad(1, fill=5.0), RandomHorizontalFlip(p=1.0)])(
        x, y, np.random.default_rng(0)
    )
    np.testing.assert_array_equal(
        out, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=5.0)[..., ::-1]
    )


def test_in_the_loader_including_an_empty_rank_batch():
    images, labels = batch(n=10, h=28, w=28)
    augment = Compose([Pad(2), RandomCrop(32, padding=4), RandomHorizontalFlip()])
    loaders = [
        DataLoader(
            ArrayDataset(images, labels), 3, shuffle=True, rank=r, world_size=3, transform=augment
        )
        for r in range(3)
    ]
    shapes = [[x.shape for x, _ in loader] for loader in loaders]
    assert shapes[2][-1] == (0, 1, 32, 32) and shapes[0][0] == (3, 1, 32, 32)


@pytest.mark.gpu
def test_cupy_batches_match_numpy():
    cupy = pytest.importorskip("cupy")
    from minidl.backend import cuda_available

    if not cuda_available():
        pytest.skip("no GPU")
    x, y = batch(n=8, h=28, w=28)
    augment = Compose([Pad(2), RandomCrop(32, padding=4), RandomHorizontalFlip(), CenterCrop(30)])
    on_host = augment(x, y, np.random.default_rng(4))[0]
    on_gpu = augment(cupy.asarray(x), y, np.random.default_rng(4))[0]
    np.testing.assert_array_equal(cupy.asnumpy(on_gpu), on_host)


def test_a_sample_is_augmented_alike_on_any_rank():
    """Crops and flips are drawn per sample, keyed by (seed, epoch, index): three ranks of
    batch 2 see, together, what one process of batch 6 sees."""
    images, labels = batch(n=12, h=28, w=28)
    augment = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()])

    def steps(rank, world, size):
        data = ArrayDataset(images, labels)
        loader = DataLoader(
            data, size, shuffle=True, rank=rank, world_size=world, transform=augment
        )
        return [x for x, _ in loader]

    whole = steps(0, 1, 6)
    shares = [steps(r, 3, 2) for r in range(3)]
    for step, x in enumerate(whole):
        np.testing.assert_array_equal(x, np.concatenate([share[step] for share in shares]))
