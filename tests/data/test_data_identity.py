"""Datasets are known by their decoded content: any gzip container or none is accepted, a
damaged file names the failing byte, another dataset is refused by name."""

import dataclasses
import gzip
import zlib
from pathlib import Path

import numpy as np
import pytest

from minidl.data import MNIST, FashionMNIST, save_idx
from minidl.data.catalog import DATASETS, FASHION_MNIST
from minidl.data.catalog import MNIST as MNIST_SPEC
from minidl.data.datasets import clear_cache
from minidl.data.idx import idx_bytes, parse_idx
from minidl.data.verify import DatasetDamagedError, DatasetMismatchError, fingerprint

DEBIAN = Path("/usr/share/datasets/fashion-mnist")
TEST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
needs_debian = pytest.mark.skipif(
    not (DEBIAN / TEST_FILES[0]).is_file(),
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)


def _container(raw, kind):
    """The same IDX bytes in another container: a timestamped gzip at level 1, two gzip
    members written by zlib, or none."""
    if kind == "level1":
        return gzip.compress(raw, compresslevel=1, mtime=1234567890)
    if kind == "two-members":
        members = []
        for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
            writer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            members.append(writer.compress(part) + writer.flush())
        return b"".join(members)
    return raw


def _write(folder, kind, contents):
    """Write the test split's two files in container ``kind`` (names without .gz when raw)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, raw in contents.items():
        data = _container(raw, kind)
        (folder / (name if kind != "raw" else name[:-3])).write_bytes(data)


@needs_debian
@pytest.mark.parametrize("kind", ["level1", "two-members", "raw"])
def test_real_fashion_mnist_is_known_in_any_container_and_refused_as_mnist(tmp_path, kind):
    contents = {name: gzip.decompress((DEBIAN / name).read_bytes()) for name in TEST_FILES}
    _write(tmp_path, kind, contents)
    if kind != "raw":
        assert (tmp_path / TEST_FILES[0]).read_bytes() != (DEBIAN / TEST_FILES[0]).read_bytes()
    data = FashionMNIST(root=tmp_path, train=False)
    assert len(data) == 10000
    np.testing.assert_array_equal(np.bincount(data.labels), np.full(10, 1000))
    with pytest.raises(DatasetMismatchError, match="this is Fashion-MNIST, not MNIST") as info:
        MNIST(root=tmp_path, train=False)
    assert "--dataset fashion-mnist" in str(info.value)


@needs_debian
def test_fashion_fingerprints_are_those_of_the_real_files():
    for name, expected in FASHION_MNIST.fingerprints.items():
        array = parse_idx(gzip.decompress((DEBIAN / name).read_bytes()))
        assert fingerprint(array) == expected


def _sums_from_statistics(mean, std, pixels):
    """Pixel sum and sum of squares implied by the published mean and std of x/255."""
    total = mean * 255 * pixels
    squares = (std**2 + mean**2) * 255**2 * pixels
    assert abs(total - round(total)) < 1e-3 and abs(squares - round(squares)) < 1e-2
    return round(total), round(squares)


@needs_debian
def test_recorded_mnist_sums_follow_from_its_published_statistics():
    # the formula reproduces Fashion-MNIST's real sums from its published statistics ...
    fashion = parse_idx(gzip.decompress((DEBIAN / "train-images-idx3-ubyte.gz").read_bytes()))
    assert (
        _sums_from_statistics(0.2860405969887955, 0.3530242445149223, 47_040_000)
        == (fingerprint(fashion)[2:])
    )
    # ... and gives the MNIST values recorded in the catalog
    prints = MNIST_SPEC.fingerprints
    assert (
        _sums_from_statistics(0.1306604762738429, 0.3081078038564622, 47_040_000)
        == (prints["train-images-idx3-ubyte.gz"][2:])
    )
    assert (
        _sums_from_statistics(0.13251460584233699, 0.3104802479305348, 7_840_000)
        == (prints["t10k-images-idx3-ubyte.gz"][2:])
    )


def test_mnist_label_counts_are_the_published_ones():
    prints = MNIST_SPEC.fingerprints
    train = (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949)
    test = (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009)
    assert prints["train-labels-idx1-ubyte.gz"] == ("labels", train) and sum(train) == 60000
    assert prints["t10k-labels-idx1-ubyte.gz"] == ("labels", test) and sum(test) == 10000


@pytest.fixture
def mnist_like(tmp_path, monkeypatch):
    """Synthetic MNIST test files; the catalog's MNIST image fingerprint is pointed at the
    synthetic images (the real ones are not on this machine), its label counts are the real."""
    rng = np.random.default_rng(0)
    counts = MNIST_SPEC.fingerprints["t10k-labels-idx1-ubyte.gz"][1]
    labels = rng.permutation(np.repeat(np.arange(10), counts)).astype(np.uint8)
    images = rng.integers(0, 256, size=(len(labels), 4, 4), dtype=np.uint8)
    prints = dict(MNIST_SPEC.fingerprints)
    prints["t10k-images-idx3-ubyte.gz"] = fingerprint(images)
    spec = dataclasses.replace(MNIST_SPEC, fingerprints=prints)
    monkeypatch.setitem(DATASETS, "mnist", spec)
    monkeypatch.setattr(MNIST, "spec", spec)
    clear_cache()
    return {TEST_FILES[0]: idx_bytes(images), TEST_FILES[1]: idx_bytes(labels)}


@pytest.mark.parametrize("kind", ["level1", "raw"])
def test_mnist_content_is_accepted_in_any_container_and_refused_as_fashion(
    tmp_path, mnist_like, kind
):
    _write(tmp_path, kind, mnist_like)
    assert len(MNIST(root=tmp_path, train=False)) == 10000
    with pytest.raises(DatasetMismatchError, match="this is MNIST, not Fashion-MNIST"):
        FashionMNIST(root=tmp_path, train=False)


def test_a_swapped_file_is_named(tmp_path, mnist_like):
    _write(tmp_path, "level1", mnist_like)
    save_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(60000, np.uint8))
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(mnist_like[TEST_FILES[0]])
    with pytest.raises(DatasetMismatchError, match="wrong file: its content is MNIST's t10k-im"):
        MNIST(root=tmp_path, train=True)


def test_other_content_is_told_apart_from_damage(tmp_path, mnist_like):
    labels = np.repeat(np.arange(10, dtype=np.uint8), 1000)  # Fashion-like counts, no known file
    contents = dict(mnist_like)
    contents[TEST_FILES[1]] = idx_bytes(labels)
    _write(tmp_path, "level1", contents)
    with pytest.raises(DatasetMismatchError) as info:
        MNIST(root=tmp_path, train=False)
    message = str(info.value)
    assert not isinstance(info.value, DatasetDamagedError)
    assert "decodes but is not MNIST's t10k-labels-idx1-ubyte: a modified file" in message
    assert "class counts [1000, 1000" in message and "[980, 1135" in message
    assert "--no-verify-data" in message
    assert len(MNIST(root=tmp_path, train=False, verify=False)) == 10000


@pytest.mark.parametrize("defect", ["truncated", "corrupt", "short-body"])
def test_a_damaged_file_names_the_failing_byte(tmp_path, mnist_like, defect):
    good = gzip.compress(mnist_like[TEST_FILES[1]], mtime=0)
    if defect == "truncated":
        data, where = good[:2000], "truncated gzip stream at byte 2000"
    elif defect == "corrupt":  # the first deflate block header (after the 10-byte gzip
        data = good[:10] + b"\xff" + good[11:]  # header) now names the reserved type 3
        where = "corrupt gzip stream at byte 10 (Error -3 while decompressing data: invalid block"
    else:
        data = gzip.compress(mnist_like[TEST_FILES[1]][:-7])
        where = "truncated: shape (10000,) of uint8 needs 10008 bytes, found 10001"
    _write(tmp_path, "level1", mnist_like)
    (tmp_path / TEST_FILES[1]).write_bytes(data)
    with pytest.raises(DatasetDamagedError) as info:
        MNIST(root=tmp_path, train=False)
    message = str(info.value)
    assert f"{tmp_path / TEST_FILES[1]} is damaged: {where}" in message
    assert "minidl data download mnist" in message
