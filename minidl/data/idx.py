"""The IDX file format of MNIST and Fashion-MNIST: read and write, gzip or raw.

Layout (LeCun et al., the MNIST page): all integers big-endian;
bytes 0-1 are zero, byte 2 is the element type, byte 3 the number of
dimensions ``ndim``; then ``ndim`` uint32 sizes; then the elements in C order.
A gzip-compressed file is recognised by its two magic bytes ``1f 8b``, not by
its name, so a renamed file still loads.
"""

import gzip
import math
import os
import struct
import zlib

import numpy as np

from ..atomic import atomic_write

GZIP_MAGIC = b"\x1f\x8b"

# IDX type code -> big-endian dtype as stored in the file.
TYPE_CODES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODE_OF_KIND = {(dt.kind, dt.itemsize): code for code, dt in TYPE_CODES.items()}
_KNOWN = ", ".join(f"0x{code:02X} {dt.newbyteorder('=').name}" for code, dt in TYPE_CODES.items())


class IDXError(ValueError):
    """An IDX file is malformed; the message names the file and the defect."""

    def __init__(self, path, defect):
        super().__init__(f"{path}: {defect}")
        self.path = path
        self.defect = defect


def read_idx_bytes(path):
    """(IDX bytes of ``path``, whether it was gzipped): gunzips when the file has the gzip magic."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:2] != GZIP_MAGIC:
        return data, False
    return gunzip(data, path), True


def gunzip(data, path="<bytes>", chunk=1 << 16):
    """Decompress gzip ``data`` (one or more members); ``IDXError`` names the failing byte.

    The stream is fed in chunks; before each chunk the decoder state is kept, so
    a failure is replayed byte by byte to find the first byte of the file that
    the decoder refuses (a corrupt stream) or where the file ends early (a
    truncated one).
    """
    out, start = [], 0
    while start < len(data):
        decoder, pos = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS), start
        while not decoder.eof:
            if pos >= len(data):
                raise IDXError(
                    path,
                    f"truncated gzip stream at byte {len(data)}: the file ends before the "
                    "stream's end marker",
                )
            saved = decoder.copy()
            try:
                out.append(decoder.decompress(data[pos : pos + chunk]))
            except zlib.error as exc:
                raise IDXError(
                    path, f"corrupt gzip stream at byte {_failing_byte(saved, data, pos)} ({exc})"
                ) from exc
            pos = min(pos + chunk, len(data))
        start = pos - len(decoder.unused_data)
        if data[start : start + 2] != GZIP_MAGIC:  # padding after the last member
            break
    return b"".join(out)


def _failing_byte(decoder, data, pos):
    """The offset of the first byte from ``pos`` on that ``decoder`` refuses."""
    for offset in range(pos, len(data)):
        try:
            decoder.decompress(data[offset : offset + 1])
        except zlib.error:
            return offset
    return len(data)


def parse_idx(data, path="<bytes>", gunzipped=False):
    """Decode IDX ``data`` (bytes, not compressed) into a native-endian NumPy array.

    ``gunzipped`` only changes the messages: byte counts are then those after gunzip.
    """
    found = f"found {len(data)}" + (" after gunzip" if gunzipped else "")
    if len(data) < 4:
        raise IDXError(path, f"truncated: the 4-byte header needs 4 bytes, {found}")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0:
        raise IDXError(
            path,
            f"wrong magic number 0x{data[:4].hex()}: an IDX file starts "
            "with two zero bytes (is it an IDX file?)",
        )
    if code not in TYPE_CODES:
        raise IDXError(path, f"unknown element type code 0x{code:02X} (known codes: {_KNOWN})")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IDXError(
            path, f"truncated: the header of {ndim} dimensions needs {header} bytes, {found}"
        )
    shape = struct.unpack(f">{ndim}I", data[4:header])
    dtype = TYPE_CODES[code]
    expected = header + math.prod(shape) * dtype.itemsize
    if len(data) < expected:
        raise IDXError(
            path,
            f"truncated: shape {shape} of {dtype.newbyteorder('=').name} "
            f"needs {expected} bytes, {found}",
        )
    if len(data) > expected:
        raise IDXError(
            path,
            f"{len(data) - expected} bytes of trailing data after the "
            f"{expected} bytes that shape {shape} needs (wrong size or "
            "a damaged file)",
        )
    flat = np.frombuffer(data, dtype=dtype, offset=header)
    return flat.astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def load_idx(path) -> np.ndarray:
    """Read an IDX file (gzip or raw, told apart by the magic bytes) into a NumPy array.

    Raises ``IDXError`` (a ``ValueError``) naming the file and the defect when
    it is truncated, has a wrong magic number or element type, carries
    trailing bytes, or is a corrupt gzip stream.
    """
    path = os.fspath(path)
    data, gunzipped = read_idx_bytes(path)
    return parse_idx(data, path, gunzipped)


def idx_bytes(array):
    """Encode ``array`` as IDX bytes (header + big-endian elements)."""
    array = np.asarray(array)
    code = _CODE_OF_KIND.get((array.dtype.kind, array.dtype.itemsize))
    if code is None:
        raise ValueError(
            f"save_idx: dtype {array.dtype} has no IDX type code; convert "
            f"the array to one of: {_KNOWN}"
        )
    if array.ndim > 255 or any(size >= 2**32 for size in array.shape):
        raise ValueError(
            f"save_idx: shape {array.shape} does not fit IDX (at most 255 "
            "dimensions, each below 2**32)"
        )
    header = struct.pack(f">HBB{array.ndim}I", 0, code, array.ndim, *array.shape)
    return header + np.ascontiguousarray(array, dtype=TYPE_CODES[code]).tobytes()


def save_idx(path, array, compress=None):
    """Write ``array`` as an IDX file, atomically (temporary file + ``os.replace``).

    ``compress=None`` gzips when the name ends in ``.gz``; True/False force it.
    """
    path = os.fspath(path)
    if compress is None:
        compress = path.endswith(".gz")
    data = idx_bytes(array)
    if compress:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    with atomic_write(path) as handle:
        handle.write(data)
