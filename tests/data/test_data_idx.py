"""IDX read/write: byte layout, round trips, and a clear error for every defect."""

import gzip
import os

import numpy as np
import pytest

from minidl.atomic import atomic_write
from minidl.data import IDXError, load_idx, save_idx

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]
SHAPES = [(0,), (7,), (3, 4), (2, 3, 5), (1, 2, 1, 3)]


def _random(dtype, shape, rng):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip(tmp_path, dtype, shape, compress):
    array = _random(dtype, shape, np.random.default_rng(1))
    path = tmp_path / "a.idx"
    save_idx(path, array, compress=compress)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == compress
    back = load_idx(path)
    assert back.dtype == np.dtype(dtype) and back.dtype.isnative
    assert back.shape == shape
    np.testing.assert_array_equal(back, array)
    assert back.flags.writeable and back.flags.c_contiguous


def test_byte_layout_by_hand(tmp_path):
    path = tmp_path / "x"
    save_idx(path, np.array([[1, 2], [3, -4]], dtype=np.int16))
    expected = bytes([0, 0, 0x0B, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 0, 2, 0, 3, 0xFF, 0xFC])
    assert path.read_bytes() == expected


def test_reads_hand_made_float_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes([0, 0, 0x0D, 1, 0, 0, 0, 2]) + np.array([1.5, -2.0], ">f4").tobytes())
    np.testing.assert_array_equal(load_idx(path), np.array([1.5, -2.0], np.float32))


def test_compression_told_by_magic_not_name(tmp_path):
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    raw_named_gz = tmp_path / "raw.gz"
    gz_named_raw = tmp_path / "gz-ubyte"
    save_idx(raw_named_gz, array, compress=False)
    save_idx(gz_named_raw, array, compress=True)
    assert raw_named_gz.read_bytes()[:2] == b"\x00\x00"
    assert gz_named_raw.read_bytes()[:2] == b"\x1f\x8b"
    np.testing.assert_array_equal(load_idx(raw_named_gz), array)
    np.testing.assert_array_equal(load_idx(gz_named_raw), array)
    save_idx(tmp_path / "auto.gz", array)  # compress=None follows the suffix
    assert (tmp_path / "auto.gz").read_bytes()[:2] == b"\x1f\x8b"


def _header(code, *dims):
    return bytes([0, 0, code, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "data, words",
    [
        (_header(0x08, 3, 4) + bytes(10), ["truncated", "needs 24 bytes", "found 22"]),
        (b"\x00\x00\x08", ["truncated", "4 bytes", "found 3"]),
        (_header(0x08, 3, 4)[:9], ["truncated", "header", "12 bytes", "found 9"]),
        (b"\x01\x02" + _header(0x08, 2)[2:] + bytes(2), ["wrong magic", "0x01020801"]),
        (_header(0x07, 2) + bytes(2), ["unknown element type", "0x07"]),
        (_header(0x08, 2, 2) + bytes(7), ["3 bytes of trailing data", "16 bytes"]),
        (_header(0x0C, 2) + bytes(7), ["truncated", "16 bytes", "found 15"]),
    ],
    ids=["short-data", "short-magic", "short-dims", "magic", "type", "trailing", "short-int32"],
)
def test_defects_give_clear_errors(tmp_path, data, words, gz):
    path = tmp_path / "bad-file"
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(IDXError) as info:
        load_idx(path)
    message = str(info.value)
    assert str(path) in message
    if "truncated" in message:  # byte counts say whether they are before or after gunzip
        assert ("after gunzip" in message) == gz
    for word in words:
        assert word in message, (word, message)
    assert isinstance(info.value, ValueError)


def test_corrupt_gzip(tmp_path):
    good = gzip.compress(_header(0x08, 1000) + os.urandom(1000))
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    for name, data in (
        ("flipped", bytes(flipped)),
        ("cut", good[: len(good) // 2]),
        ("bad-crc", good[:-8] + bytes(8)),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(IDXError, match="(corrupt|truncated) gzip stream at byte") as info:
            load_idx(path)
        assert str(path) in str(info.value)


def test_save_rejects_unsupported_dtype_and_keeps_old_file(tmp_path):
    path = tmp_path / "keep.idx"
    save_idx(path, np.arange(3, dtype=np.uint8))
    before = path.read_bytes()
    with pytest.raises(ValueError, match="int64 has no IDX type code"):
        save_idx(path, np.arange(3, dtype=np.int64))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["keep.idx"]


def test_atomic_write_leaves_target_untouched_on_error(tmp_path):
    path = tmp_path / "t"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as handle:
            handle.write(b"half of the new")
            raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["t"]
    with atomic_write(path) as handle:
        handle.write(b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["t"]


def test_atomic_write_names_the_file_only_for_the_file_systems_errors(tmp_path):
    path = tmp_path / "t"
    with pytest.raises(OSError) as full:
        with atomic_write(path):
            raise OSError(28, "No space left on device")
    assert (
        str(full.value) == f"[Errno 28] could not write {path}: No space left on device "
        "(the previous version, if any, is intact)"
    )
    mine = OSError("checksum mismatch: download it again")
    with pytest.raises(OSError) as raised:
        with atomic_write(path):
            raise mine
    assert raised.value is mine
