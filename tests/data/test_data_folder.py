"""Image folders on real files (JPEG and PNG, several sizes, grey and RGB, one corrupt): the
layout, the paper's preparation and its statistics, the colour PCA and its cache, the loader."""

import threading

import numpy as np
import pytest

from minidl.data import DataLoader, FolderError, ImageDecodeError, ImageFolder, Preparation
from minidl.data.colour import colour_stats, on_rank_zero
from minidl.data.imageprep import load_patch, pca_noise

pytest.importorskip("PIL")


def test_layout_labels_and_both_validation_forms(image_folder):
    root, made = image_folder(corrupt=False)
    train = ImageFolder(root, train=True)
    assert train.classes == ("ant", "bee", "cat")
    assert sorted(zip(map(str, train.samples), train.labels)) == sorted(
        (str(p), label) for p, label in made["train"]
    )
    val = ImageFolder(root, train=False, stats=train.stats)
    assert sorted(zip(map(str, val.samples), val.labels)) == sorted(
        (str(p), label) for p, label in made["val"]
    )
    x, y = val[0]
    assert x.shape == (3, 224, 224) and x.dtype == np.float32 and y == val.labels[0]


def test_flat_validation_folder_with_a_label_file(image_folder):
    root, made = image_folder(corrupt=False, flat_val=True)
    val = ImageFolder(root, train=False)
    assert sorted(zip(map(str, val.samples), val.labels)) == sorted(
        (str(p), label) for p, label in made["val"]
    )
    (root / "val_labels.txt").write_text("val_ant_0.JPEG dog\n")
    with pytest.raises(FolderError, match="line 1: 'dog' is neither a class folder"):
        ImageFolder(root, train=False)
    (root / "val_labels.txt").unlink()
    with pytest.raises(FolderError, match="val_labels.txt does not exist"):
        ImageFolder(root, train=False)


def test_a_folder_without_train_is_refused(tmp_path):
    with pytest.raises(FolderError, match="has no train/ folder"):
        ImageFolder(tmp_path)


def test_a_validation_class_unknown_to_train_is_refused(image_folder):
    root, made = image_folder(corrupt=False)
    (root / "val" / "dog").mkdir()
    with pytest.raises(FolderError, match=r"class folders \['dog'\] are not training classes"):
        ImageFolder(root, train=False)


def test_patch_is_the_centre_of_the_shorter_side_resized(tmp_path):
    from PIL import Image

    # 256 wide, 512 tall: no rescaling, the patch is rows 128..383
    rows = np.repeat(np.arange(512, dtype=np.uint16)[:, None] // 2, 256, axis=1).astype(np.uint8)
    Image.fromarray(rows, mode="L").save(tmp_path / "tall.png")
    patch = load_patch(tmp_path / "tall.png")
    assert patch.shape == (256, 256, 3)
    np.testing.assert_array_equal(patch[:, :, 0], rows[128:384])
    np.testing.assert_array_equal(patch[..., 0], patch[..., 2])  # grey became RGB
    Image.fromarray(np.zeros((40, 90, 3), np.uint8)).save(tmp_path / "small.jpg")
    assert load_patch(tmp_path / "small.jpg").shape == (256, 256, 3)  # upscaled


def test_unreadable_image_names_the_file(tmp_path):
    (tmp_path / "bad.JPEG").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(ImageDecodeError, match="bad.JPEG: cannot decode the image"):
        load_patch(tmp_path / "bad.JPEG")


def _position_patch():
    """A patch whose pixel (r, c) holds (r, c, 0): a crop's corner tells where it was cut."""
    r, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    return np.stack([r, c, np.zeros_like(r)], axis=-1).astype(np.uint8)


def test_random_crop_positions_and_flip_rate():
    prep = Preparation(train=True, crop=224, pca_std=0.0)
    rng, patch, n = np.random.default_rng(0), _position_patch(), 3300
    tops, lefts, flips = [], [], 0
    for _ in range(n):
        image = prep(patch, rng)
        flipped = image[1, 0, 0] > image[1, 0, -1]
        flips += flipped
        tops.append(image[0, 0, 0])
        lefts.append(image[1, 0, -1] if flipped else image[1, 0, 0])
    for offsets in (tops, lefts):  # uniform over the 33 positions 0..32
        counts = np.bincount(np.asarray(offsets, dtype=int), minlength=33)
        assert len(counts) == 33 and counts.min() > 0
        chi2 = ((counts - n / 33) ** 2 / (n / 33)).sum()
        assert chi2 < 70  # 32 degrees of freedom: P(chi2 > 70) < 1e-4
    assert abs(flips / n - 0.5) < 0.035  # 4 standard deviations of a fair coin


def test_pca_noise_scale_and_direction():
    values = np.array([3000.0, 200.0, 20.0])
    vectors = np.linalg.qr(np.arange(9.0).reshape(3, 3) + np.eye(3))[0]  # orthonormal columns
    prep = Preparation(
        True, crop=8, resize=8, mean=[10, 20, 30], eigenvalues=values, eigenvectors=vectors
    )
    rng, patch = np.random.default_rng(1), np.zeros((8, 8, 3), np.uint8)
    alphas = []
    for _ in range(3000):
        image = prep(patch, rng)
        offset = image[:, 0, 0].astype(np.float64) + [10, 20, 30]
        assert np.ptp(image.reshape(3, -1), axis=1).max() < 1e-4  # one colour offset per image
        alphas.append(vectors.T @ offset / np.sqrt(values))
    alphas = np.array(alphas)
    assert np.all(np.abs(alphas.mean(axis=0)) < 0.01)  # 0.1 / sqrt(3000) * 5
    assert np.all(np.abs(alphas.std(axis=0) - 0.1) < 0.01)
    np.testing.assert_allclose(
        pca_noise(values, vectors, np.array([1.0, 0, 0])), vectors[:, 0] * np.sqrt(3000)
    )


def test_centre_crop_and_ten_crops():
    patch = _position_patch()
    centre = Preparation(train=False, crop=224)(patch)
    assert centre[0, 0, 0] == 16 and centre[1, 0, 0] == 16
    crops = Preparation(train=False, crop=224, ten_crop=True)(patch)
    assert crops.shape == (10, 3, 224, 224)
    corners = [(c[0, 0, 0], c[1, 0, 0]) for c in crops[:5]]
    assert corners == [(0, 0), (0, 32), (32, 0), (32, 32), (16, 16)]
    np.testing.assert_array_equal(crops[4], centre)
    np.testing.assert_array_equal(crops[5:], crops[:5, :, :, ::-1])


def test_colour_statistics_match_numpy_and_are_cached(image_folder, tmp_path):
    root, made = image_folder(corrupt=False)
    paths = [p for p, _ in made["train"]]
    stats = colour_stats(paths, cache=tmp_path / "c")
    pixels = np.concatenate([load_patch(p).reshape(-1, 3) for p in paths]).astype(np.float64)
    np.testing.assert_allclose(stats.mean, pixels.mean(axis=0), rtol=1e-12)
    cov = np.cov(pixels.T, bias=True)
    np.testing.assert_allclose(
        cov @ stats.eigenvectors, stats.eigenvectors * stats.eigenvalues, rtol=1e-9, atol=1e-6
    )
    assert list(stats.eigenvalues) == sorted(stats.eigenvalues, reverse=True)
    (cached,) = (tmp_path / "c").iterdir()
    again = colour_stats(paths, cache=tmp_path / "c")
    np.testing.assert_array_equal(again.eigenvectors, stats.eigenvectors)
    np.savez(cached, mean=np.zeros(3), values=np.ones(3), vectors=np.eye(3), images=1)
    assert colour_stats(paths, cache=tmp_path / "c").images == 1  # read, not measured again
    paths[0].write_bytes(paths[1].read_bytes())  # the folder changed: measured again
    assert colour_stats(paths, cache=tmp_path / "c").images == len(paths)


def test_a_corrupt_training_image_is_named_or_skipped_with_a_count(image_folder):
    root, made = image_folder()
    with pytest.raises(ImageDecodeError, match="zz_broken.JPEG"):
        ImageFolder(root)
    train = ImageFolder(root, skip_unreadable=True, crop=64, resize=72)
    assert train.stats.images == len(made["train"])  # the corrupt file left out
    with pytest.raises(ImageDecodeError, match="zz_broken.JPEG: cannot decode"):
        list(DataLoader(train, 4, workers=2))
    loader = DataLoader(train, 4, workers=2, skip_unreadable=True)
    batches = list(loader)
    assert sum(len(y) for _, y in batches) == len(made["train"])
    assert [error.path for error in loader.skipped] == [str(made["corrupt"])]


def _epoch(dataset, workers, batch, rank=0, world_size=1, seed=3):
    loader = DataLoader(
        dataset,
        batch,
        shuffle=True,
        seed=seed,
        workers=workers,
        rank=rank,
        world_size=world_size,
        prefetch=2,
    )
    loader.set_epoch(1)
    return list(loader)


def test_same_batches_whatever_the_worker_and_rank_count(image_folder):
    root, _ = image_folder(corrupt=False)
    train = ImageFolder(root, crop=56, resize=64)
    alone = _epoch(train, workers=0, batch=4)
    for workers in (1, 3):
        for (x, y), (x0, y0) in zip(_epoch(train, workers, 4), alone, strict=True):
            np.testing.assert_array_equal(x, x0)
            np.testing.assert_array_equal(y, y0)
    shards = [_epoch(train, workers=2, batch=2, rank=r, world_size=2) for r in (0, 1)]
    for (x0, y0), (xa, ya), (xb, yb) in zip(alone, *shards, strict=True):
        np.testing.assert_array_equal(np.concatenate([xa, xb]), x0)
        np.testing.assert_array_equal(np.concatenate([ya, yb]), y0)
    other = _epoch(train, workers=2, batch=4, seed=4)
    assert not np.array_equal(other[0][0], alone[0][0])


def test_leaving_an_epoch_early_stops_the_workers(image_folder):
    root, _ = image_folder(corrupt=False)
    train = ImageFolder(root, crop=56, resize=64)
    before = threading.active_count()
    batches = iter(DataLoader(train, 2, workers=2, prefetch=3))
    next(batches)
    assert threading.active_count() > before  # the workers run ahead
    batches.close()
    assert threading.active_count() == before


def test_a_subset_holds_every_class(image_folder):
    root, _ = image_folder(corrupt=False)
    train = ImageFolder(root, crop=56, resize=64)
    subset = train.first(4)
    assert sorted(subset.labels.tolist()) == [0, 0, 1, 2]  # round-robin: 0, 1, 2, then 0
    assert set(subset.samples) <= set(train.samples) and len(subset) == 4
    assert train.first(None) is train


class FakeComm:
    """A rank of a two-rank job whose broadcasts are recorded (rank 0) or given (rank 1)."""

    size = 2

    def __init__(self, rank, received=None):
        self.rank, self.received, self.sent = rank, received, []

    def bcast_object(self, obj, root=0):
        self.sent.append(obj)
        return obj if self.rank == 0 else self.received


def test_rank_zero_sends_its_result_or_its_error_and_the_other_ranks_raise_it():
    root = FakeComm(0)
    assert on_rank_zero(root, lambda: 42) == 42 and root.sent == [(True, 42)]
    assert on_rank_zero(FakeComm(1, (True, 42)), lambda: 1 / 0) == 42  # rank 1 never works

    class Unpicklable(ValueError):
        def __init__(self):
            super().__init__("bad folder")
            self.handle = lambda: None  # pickle refuses lambdas

    def fails():
        raise Unpicklable()

    root = FakeComm(0)
    with pytest.raises(Unpicklable):
        on_rank_zero(root, fails)
    ((done, error),) = root.sent
    assert not done and isinstance(error, RuntimeError) and str(error) == "Unpicklable: bad folder"
    with pytest.raises(RuntimeError, match="Unpicklable: bad folder"):
        on_rank_zero(FakeComm(1, (False, error)), fails)
