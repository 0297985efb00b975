"""Fashion-MNIST/MNIST: real files (when installed), lookup order, identity, the not-found
message."""

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest

from minidl.data import (
    MNIST,
    DatasetMismatchError,
    DatasetNotFoundError,
    FashionMNIST,
    locate,
    save_idx,
)
from minidl.data.catalog import FASHION_MNIST

DEBIAN = Path("/usr/share/datasets/fashion-mnist")
needs_debian = pytest.mark.skipif(
    not (DEBIAN / "train-images-idx3-ubyte.gz").is_file(),
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)


def _decode_by_hand(path, offset):
    """An independent reader: gunzip and skip the fixed header of the official files."""
    return np.frombuffer(gzip.decompress(path.read_bytes()), np.uint8, offset=offset)


@needs_debian
def test_real_fashion_mnist_train():
    data = FashionMNIST(root=DEBIAN, train=True)
    assert data.images.shape == (60000, 1, 28, 28) and data.images.dtype == np.float32
    assert data.images.flags.c_contiguous
    assert data.labels.shape == (60000,) and data.labels.dtype == np.int64
    assert (
        len(data.classes) == 10
        and data.classes[0] == "T-shirt/top"
        and data.classes[9] == "Ankle boot"
    )
    np.testing.assert_array_equal(np.bincount(data.labels, minlength=10), np.full(10, 6000))
    assert abs(data.images.mean(dtype=np.float64)) < 1e-3
    assert abs(data.images.std(dtype=np.float64) - 1) < 1e-3
    raw = _decode_by_hand(DEBIAN / "train-images-idx3-ubyte.gz", 16).reshape(60000, 28, 28)
    some = [0, 1, 12345, 59999]
    np.testing.assert_allclose(data.images[some, 0], (raw[some] / 255 - 0.2860) / 0.3530, atol=1e-5)
    labels = _decode_by_hand(DEBIAN / "train-labels-idx1-ubyte.gz", 8)
    np.testing.assert_array_equal(data.labels, labels)
    image, label = data[12345]
    assert image.shape == (1, 28, 28) and label == labels[12345]
    assert len(data) == 60000


@needs_debian
def test_real_fashion_mnist_test():
    data = FashionMNIST(root=DEBIAN, train=False)
    assert data.images.shape == (10000, 1, 28, 28) and data.labels.shape == (10000,)
    np.testing.assert_array_equal(np.bincount(data.labels, minlength=10), np.full(10, 1000))
    assert abs(data.images.mean()) < 0.05  # test statistics are close to, not equal to, train's


def test_real_mnist_when_present():
    try:
        data = MNIST(train=True)
    except DatasetNotFoundError:
        pytest.skip("MNIST not present (minidl data download mnist)")
    assert data.images.shape == (60000, 1, 28, 28) and data.labels.max() == 9
    assert abs(data.images.mean(dtype=np.float64)) < 1e-3
    assert abs(data.images.std(dtype=np.float64) - 1) < 1e-3


@pytest.fixture
def places(tmp_path, monkeypatch, fake_dataset):
    """Four folders (root, $MINIDL_DATA, cache, a stand-in Debian folder) with distinct data
    sizes."""
    folders = {name: tmp_path / name for name in ("root", "env", "xdg", "debian")}
    monkeypatch.setenv("XDG_CACHE_HOME", str(folders["xdg"]))
    monkeypatch.setenv("MINIDL_DATA", str(folders["env"]))
    spec = dataclasses.replace(
        FASHION_MNIST,
        debian_dirs=(str(folders["debian"]),),
        sha256={},
        raw_sha256={},
        fingerprints={},
    )  # synthetic files: nothing to verify
    monkeypatch.setattr(FashionMNIST, "spec", spec)
    sizes = {"root": 3, "env": 4, "xdg": 5, "debian": 7}
    homes = {
        "root": folders["root"],
        "env": folders["env"] / "fashion-mnist",
        "xdg": folders["xdg"] / "minidl" / "fashion-mnist",
        "debian": folders["debian"],
    }
    for name, n in sizes.items():
        fake_dataset(homes[name], n_train=n, n_test=n, compressed=name != "env", seed=n)
    return folders, homes, spec


def test_lookup_order(places):
    folders, homes, spec = places
    assert len(FashionMNIST(root=folders["root"])) == 3
    assert locate(spec, folders["root"]) == homes["root"]
    assert len(FashionMNIST()) == 4  # $MINIDL_DATA/fashion-mnist, uncompressed
    for path in homes["env"].iterdir():
        path.unlink()
    assert len(FashionMNIST()) == 5  # then the cache
    assert locate(spec) == homes["xdg"]
    for path in homes["xdg"].iterdir():
        path.unlink()
    assert len(FashionMNIST(train=False)) == 7  # the Debian folder comes last
    assert FashionMNIST().root == homes["debian"]


def test_an_explicit_root_without_the_files_is_an_error_not_a_fall_back(places):
    folders, homes, spec = places
    (homes["root"] / "train-labels-idx1-ubyte.gz").unlink()
    assert FashionMNIST(root=folders["root"], train=False).root == homes["root"]
    with pytest.raises(DatasetNotFoundError) as info:
        FashionMNIST(root=folders["root"], train=True)  # $MINIDL_DATA has them: not used
    message = str(info.value)
    assert f"not found in --data-dir {folders['root']}" in message
    assert "missing train-labels-idx1-ubyte[.gz]" in message
    assert str(homes["env"]) not in message and "leave out --data-dir" in message


def test_not_found_lists_every_place_and_the_fixes(tmp_path, monkeypatch, fake_dataset):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    nowhere = dataclasses.replace(FASHION_MNIST, debian_dirs=(str(tmp_path / "no-debian"),))
    monkeypatch.setattr(FashionMNIST, "spec", nowhere)
    (tmp_path / "half").mkdir()
    fake_dataset(tmp_path / "half")
    (tmp_path / "half" / "t10k-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setenv("MINIDL_DATA", str(tmp_path / "half"))
    with pytest.raises(DatasetNotFoundError) as info:
        FashionMNIST(train=False)
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    for expected in [
        "Fashion-MNIST (test split) not found",
        f"{tmp_path / 'half'} ($MINIDL_DATA): missing t10k-labels-idx1-ubyte[.gz]",
        f"{tmp_path / 'half' / 'fashion-mnist'} ($MINIDL_DATA): no such folder",
        f"{tmp_path / 'xdg' / 'minidl' / 'fashion-mnist'} (cache): no such folder",
        f"{tmp_path / 'no-debian'} (Debian package dataset-fashion-mnist)",
        "apt-get install dataset-fashion-mnist",
        "minidl data download fashion-mnist",
        "download=True",
        "--data-dir DIR",
    ]:
        assert expected in message, (expected, message)


def test_default_cache_is_under_home(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("MINIDL_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DatasetNotFoundError) as info:
        MNIST()
    message = str(info.value)
    assert f"{tmp_path / '.cache' / 'minidl' / 'mnist'} (cache)" in message
    assert "apt-get" not in message  # Debian ships no MNIST package


def test_normalisation_and_labels_of_synthetic_files(tmp_path, fake_dataset):
    arrays = fake_dataset(tmp_path, n_train=5, n_test=2)
    data = MNIST(root=tmp_path, verify=False)
    images, labels = arrays["train"]
    np.testing.assert_allclose(data.images[:, 0], (images / 255.0 - 0.1307) / 0.3081, atol=1e-5)
    np.testing.assert_array_equal(data.labels, labels)
    assert data.classes == tuple("0123456789")


def test_rewritten_file_is_read_again(tmp_path, fake_dataset):
    fake_dataset(tmp_path, n_train=5, seed=1)
    first = MNIST(root=tmp_path, verify=False).images.copy()
    fake_dataset(tmp_path, n_train=5, seed=2)
    assert not np.array_equal(MNIST(root=tmp_path, verify=False).images, first)


def test_mismatched_files_are_rejected(tmp_path, fake_dataset):
    fake_dataset(tmp_path, n_train=5)
    save_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="expected 5 uint8 labels"):
        MNIST(root=tmp_path, verify=False)
    save_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.full(5, 10, np.uint8))
    with pytest.raises(ValueError, match="label 10 out of range for 10 classes"):
        MNIST(root=tmp_path, verify=False)


@needs_debian
def test_fashion_mnist_files_are_never_loaded_as_mnist(tmp_path):
    with pytest.raises(
        DatasetMismatchError,
        match="this is Fashion-MNIST, not MNIST: its content is Fashion-MNIST's "
        "t10k-images-idx3-ubyte",
    ):
        MNIST(root=DEBIAN, train=False)
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):  # uncompressed copies too
        (tmp_path / name).write_bytes(gzip.decompress((DEBIAN / f"{name}.gz").read_bytes()))
    with pytest.raises(DatasetMismatchError, match="--dataset fashion-mnist"):
        MNIST(root=tmp_path, train=False)
    assert len(FashionMNIST(root=tmp_path, train=False)) == 10000


@needs_debian
def test_a_damaged_file_is_refused_with_the_fix(tmp_path):
    data = bytearray((DEBIAN / "t10k-labels-idx1-ubyte.gz").read_bytes())
    data[-20] ^= 0xFF
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(bytes(data))
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(
        (DEBIAN / "t10k-images-idx3-ubyte.gz").read_bytes()
    )
    with pytest.raises(DatasetMismatchError) as info:
        FashionMNIST(root=tmp_path, train=False)
    message = str(info.value)
    assert "t10k-labels-idx1-ubyte.gz is damaged: corrupt gzip stream at byte" in message
    assert "minidl data download fashion-mnist" in message
