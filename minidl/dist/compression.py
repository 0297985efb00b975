"""Gradient compression: fewer bytes than 4 per float on the wire, and the optimizer that
averages gradients in them.

Each scheme turns a float32 vector of n elements into ``wire_bytes(n)`` bytes, indices
and scales included, and back. Ben-Nun & Hoefler (2019, §6.3) names the schemes; the
formulas are the primary sources':

* ``Compressor()``: no compression, float32, 4n bytes.
* ``Float16()``: IEEE half precision (round to nearest), 2n bytes; halves can
  be summed, so a synchronous job reduces them directly.
* ``QSGD(levels=S, bucket=d)``: QSGD (Alistarh et al. 2017). Per bucket of d
  values with norm ||v||_2: Q(v_i) = ||v|| sgn(v_i) xi_i / S, where with
  l = floor(S |v_i| / ||v||), xi_i = l + 1 with probability S|v_i|/||v|| - l and
  l otherwise; unbiased, E[Q(v)] = v. A signed level in [-S, S] packs into
  the smallest of 2/4/8/16 bits; 4 bytes of norm per bucket.
* ``TernGrad(bucket)``: TernGrad (Wen et al. 2017). Per bucket, s = max|v_i|,
  Q(v_i) = s sgn(v_i) b_i with b_i ~ Bernoulli(|v_i|/s); unbiased. 2 bits per
  value plus a 4-byte scale per bucket.
* ``TopK(ratio)``: the k = ceil(ratio n) largest |v_i| (Aji & Heafield 2017;
  Lin et al. 2018), sent as k uint32 indices and k float32 values: 8k bytes.
* ``Sign(bucket)``: 1-bit SGD (Seide et al. 2014). One bit per value says
  v_i >= 0; each bucket sends two reconstruction values, the mean of its
  non-negative and of its negative entries: n/8 bytes plus 8 per bucket.

Top-k and sign are biased and need error feedback (Ben-Nun & Hoefler 2019, §6.3.1):
``GradientEncoder`` compresses v = g + r and keeps r <- v - sent. ``CompressedOptimizer``
averages the whole gradient after backward in a scheme's format.
"""

import math
import time

import numpy as np

from minidl.backend import get_array_module, to_numpy
from minidl.dist.data_parallel import FlatBuffer, ReplicatedOptimizer
from minidl.intmath import ceil_div

DEFAULT_BUCKET = 512


# ---- bit packing ----------------------------------------------------------------------------
def code_bits(levels):
    """Bits per code for ``levels`` distinct unsigned codes: 1, 2, 4, 8 or 16."""
    for bits in (1, 2, 4, 8, 16):
        if levels <= 1 << bits:
            return bits
    raise ValueError(f"{levels} levels do not fit in 16 bits")


def pack_codes(codes, bits):
    """Unsigned codes < 2**bits -> bytes, little-endian within each byte (host uint8)."""
    codes = to_numpy(codes)
    if bits == 16:
        return codes.astype("<u2").view(np.uint8)
    if bits == 8:
        return codes.astype(np.uint8)
    if bits == 1:
        return np.packbits(codes.astype(np.uint8), bitorder="little")
    per_byte = 8 // bits
    padded = np.zeros(ceil_div(codes.size, per_byte) * per_byte, dtype=np.uint8)
    padded[: codes.size] = codes
    shifts = (np.arange(per_byte) * bits).astype(np.uint8)
    return np.bitwise_or.reduce(padded.reshape(-1, per_byte) << shifts, axis=1).astype(np.uint8)


def unpack_codes(packed, n, bits):
    """The inverse of ``pack_codes``: ``n`` codes (uint16 for 16 bits, uint8 otherwise)."""
    if bits == 16:
        return packed[: 2 * n].view("<u2").astype(np.uint16)
    if bits == 8:
        return packed[:n].copy()
    if bits == 1:
        return np.unpackbits(packed, count=n, bitorder="little")
    per_byte = 8 // bits
    shifts = (np.arange(per_byte) * bits).astype(np.uint8)
    codes = (packed[:, None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(-1)[:n]


def _buckets(v, bucket):
    """``v`` zero-padded to whole buckets, shaped (buckets, bucket)."""
    xp = get_array_module(v)
    count = ceil_div(v.size, bucket)
    padded = xp.zeros(count * bucket, dtype=np.float32)
    padded[: v.size] = v
    return padded.reshape(count, bucket)


# ---- the schemes ----------------------------------------------------------------------------
class Compressor:
    """A wire format for float32 vectors; this base sends them as they are ("none")."""

    name = "none"
    summable = False  # payloads of several ranks can be added as they are
    error_feedback = False  # the default for GradientEncoder (on for the biased schemes)

    def wire_bytes(self, n):
        """Exact length of ``encode(v)`` for ``v`` of ``n`` elements."""
        return 4 * n

    def encode(self, v, rng=None):
        """``v`` (float32, flat) -> uint8 host array of ``wire_bytes(v.size)`` bytes."""
        return np.ascontiguousarray(to_numpy(v), dtype=np.float32).view(np.uint8)

    def decode(self, payload, n):
        """The float32 vector (host) that ``payload`` stands for."""
        return payload[: 4 * n].view(np.float32).copy()

    def __repr__(self):
        return self.name


class Float16(Compressor):
    """IEEE half precision, round to nearest: 2 bytes per value, summable."""

    name, summable = "fp16", True

    def wire_bytes(self, n):
        return 2 * n

    def encode(self, v, rng=None):
        return to_numpy(v).astype(np.float16).view(np.uint8)

    def decode(self, payload, n):
        return payload[: 2 * n].view(np.float16).astype(np.float32)


class _BucketScaled(Compressor):
    """Codes per value plus ``scales_per_bucket`` float32 scales per bucket of ``bucket`` values."""

    scales_per_bucket = 1
    zero_code = 0

    def __init__(self, bucket=DEFAULT_BUCKET):
        if int(bucket) < 1:
            raise ValueError(f"{self.name}: the bucket size must be >= 1, got {bucket}")
        self.bucket = int(bucket)

    def bits(self):
        raise NotImplementedError

    def wire_bytes(self, n):
        buckets = ceil_div(n, self.bucket)
        return 4 * self.scales_per_bucket * buckets + ceil_div(n * self.bits(), 8)  # packed codes

    def _payload(self, scales, codes, n):
        """Scales, then the first ``n`` codes (the rest is bucket padding)."""
        scales = np.ascontiguousarray(to_numpy(scales), dtype=np.float32).reshape(-1)
        packed = pack_codes(codes.reshape(-1)[:n], self.bits())
        return np.concatenate([scales.view(np.uint8), packed])

    def _split(self, payload, n):
        """(scales shaped (buckets, scales_per_bucket), codes shaped (buckets, bucket)).
        The padding after the ``n`` codes gets ``zero_code``, the code of 0."""
        buckets = ceil_div(n, self.bucket)
        head = 4 * self.scales_per_bucket * buckets
        scales = payload[:head].view(np.float32).reshape(buckets, self.scales_per_bucket)
        codes = np.full(buckets * self.bucket, self.zero_code, dtype=np.int32)
        codes[:n] = unpack_codes(payload[head:], n, self.bits())
        return scales, codes.reshape(buckets, self.bucket)


class QSGD(_BucketScaled):
    """QSGD with ``levels`` = s quantisation levels per sign (Alistarh et al. 2017)."""

    name = "qsgd"

    def __init__(self, levels, bucket=DEFAULT_BUCKET):
        super().__init__(bucket)
        if int(levels) < 1 or int(levels) > 32767:
            raise ValueError(f"qsgd: levels must be in 1..32767, got {levels}")
        self.levels = self.zero_code = int(levels)
        self.name = f"qsgd:{self.levels}"

    def bits(self):
        return code_bits(2 * self.levels + 1)

    def encode(self, v, rng=None):
        xp = get_array_module(v)
        s = self.levels
        blocks = _buckets(v, self.bucket)
        norms = xp.sqrt((blocks.astype(np.float64) ** 2).sum(axis=1)).astype(np.float32)
        safe = xp.where(norms > 0, norms, 1)[:, None]
        scaled = xp.abs(blocks) / safe * s  # in [0, s]
        lower = xp.floor(scaled)
        level = lower + (rng.random(scaled.shape, dtype=np.float32) < scaled - lower)
        level = xp.minimum(level, s)  # float rounding at |v_i| = ||v||
        signed = xp.where(blocks < 0, -level, level)
        return self._payload(norms, (signed + s).astype(np.uint16), v.size)

    def decode(self, payload, n):
        norms, codes = self._split(payload, n)
        signed = codes.astype(np.float32) - self.levels
        return (signed * (norms / self.levels)).reshape(-1)[:n]


class TernGrad(_BucketScaled):
    """TernGrad: s * sign(v) * Bernoulli(|v|/s) with s = max |v| per bucket (Wen et al. 2017)."""

    name, zero_code = "terngrad", 1

    def bits(self):
        return 2

    def encode(self, v, rng=None):
        xp = get_array_module(v)
        blocks = _buckets(v, self.bucket)
        scale = xp.abs(blocks).max(axis=1)
        safe = xp.where(scale > 0, scale, 1)[:, None]
        keep = rng.random(blocks.shape, dtype=np.float32) < xp.abs(blocks) / safe
        codes = xp.where(keep, xp.where(blocks < 0, 0, 2), 1)
        return self._payload(scale, codes.astype(np.uint8), v.size)

    def decode(self, payload, n):
        scale, codes = self._split(payload, n)
        return ((codes.astype(np.float32) - 1) * scale).reshape(-1)[:n]


class Sign(_BucketScaled):
    """1-bit SGD: one bit per value, two reconstruction means per bucket (Seide et al. 2014)."""

    name, error_feedback, scales_per_bucket = "sign", True, 2

    def bits(self):
        return 1

    def encode(self, v, rng=None):
        xp = get_array_module(v)
        n = v.size
        blocks = _buckets(v, self.bucket)
        real = (xp.arange(blocks.size) < n).reshape(blocks.shape)  # not padding
        positive = (blocks >= 0) & real
        negative = (blocks < 0) & real

        def mean(mask):
            return (blocks * mask).sum(axis=1) / xp.maximum(mask.sum(axis=1), 1)

        return self._payload(xp.stack([mean(positive), mean(negative)], axis=1), positive, n)

    def decode(self, payload, n):
        means, bits = self._split(payload, n)
        return np.where(bits == 1, means[:, :1], means[:, 1:]).reshape(-1)[:n]


class TopK(Compressor):
    """The k = ceil(ratio * n) largest magnitudes as (uint32 index, float32 value) pairs."""

    name, error_feedback = "topk", True

    def __init__(self, ratio):
        if not 0 < float(ratio) <= 1:
            raise ValueError(f"topk: the ratio must be in (0, 1], got {ratio}")
        self.ratio = float(ratio)
        self.name = f"topk:{ratio}"

    def count(self, n):
        """How many values are sent from a vector of ``n``."""
        return min(n, max(1, math.ceil(self.ratio * n))) if n else 0

    def wire_bytes(self, n):
        return 8 * self.count(n)

    def encode(self, v, rng=None):
        xp = get_array_module(v)
        k = self.count(v.size)
        index = xp.zeros(0, dtype=np.int64)
        if k:
            index = xp.sort(xp.argpartition(xp.abs(v), v.size - k)[v.size - k :])
        values = np.ascontiguousarray(to_numpy(v[index]), dtype=np.float32)
        return np.concatenate(
            [to_numpy(index).astype(np.uint32).view(np.uint8), values.view(np.uint8)]
        )

    def decode(self, payload, n):
        k = self.count(n)
        index = payload[: 4 * k].view(np.uint32)
        out = np.zeros(n, dtype=np.float32)
        out[index] = payload[4 * k : 8 * k].view(np.float32)
        return out


class GradientEncoder:
    """One rank's compressor for a vector of ``n`` values, with optional error feedback.
    Error feedback (Seide et al. 2014; Lin et al. 2018) sends the compression of v = g + r
    and keeps r <- v - sent, so sum(sent) + r = sum(g) over any run of steps (to rounding).
    ``error_feedback=None``: the scheme's default (on for top-k and sign)."""

    def __init__(self, compressor, n, error_feedback=None, seed=0, xp=np):
        if not isinstance(compressor, Compressor):
            raise TypeError(
                f"GradientEncoder: expected a Compressor, got {compressor!r}; build one, "
                "e.g. TopK(ratio=0.01), QSGD(levels=4) or Compressor() for none"
            )
        self.compressor = compressor
        self.n = int(n)
        if error_feedback is None:
            error_feedback = self.compressor.error_feedback
        self.residual = xp.zeros(self.n, dtype=np.float32) if error_feedback else None
        self.rng = xp.random.default_rng(seed)

    @property
    def wire_bytes(self):
        return self.compressor.wire_bytes(self.n)

    def encode(self, g):
        """Compress ``g`` plus the residual; returns (payload bytes, the vector they decode to)."""
        if g.size != self.n:
            raise ValueError(f"GradientEncoder: expected {self.n} values, got {g.size}")
        v = g + self.residual if self.residual is not None else g
        payload = self.compressor.encode(v, self.rng)
        sent = self.compressor.decode(payload, self.n)
        if self.residual is not None:
            xp = get_array_module(self.residual)
            self.residual = v - xp.asarray(sent)
        return payload, sent


# ---- the optimizer --------------------------------------------------------------------------
class CompressedAllreduce:
    """Average a gradient vector over all ranks through a compressed wire format.
    fp16 halves are allreduced as they are. The other formats cannot be summed without
    decoding (two top-k vectors do not add to one), so every payload is allgathered and
    each rank decodes and averages them in rank order: every replica gets the same bits."""

    def __init__(self, comm, encoder, algorithm="auto"):
        self.comm, self.encoder, self.algorithm = comm, encoder, algorithm
        summable = encoder.compressor.summable
        self.gathered = None if summable else np.empty((comm.size, encoder.wire_bytes), np.uint8)
        self.steps = 0

    def mean(self, grad):
        """The average over ranks of every rank's compressed ``grad`` (float32, host)."""
        payload, _ = self.encoder.encode(grad)
        self.steps += 1
        compressor, n = self.encoder.compressor, self.encoder.n
        if self.gathered is None:
            halves = payload.view(np.float16).copy()
            self.comm.allreduce(halves, op="mean", algorithm=self.algorithm)
            return halves.astype(np.float32)
        self.comm.allgather(payload, self.gathered)
        total = compressor.decode(self.gathered[0], n)
        for rank in range(1, self.comm.size):
            total += compressor.decode(self.gathered[rank], n)
        total /= np.float32(self.comm.size)
        return total

    def record(self, epoch):
        """A metrics record: scheme, error feedback, bytes per step against float32."""
        n = self.encoder.n
        return {
            "kind": "compression",
            "epoch": epoch,
            "scheme": self.encoder.compressor.name,
            "error_feedback": self.encoder.residual is not None,
            "steps": self.steps,
            "payload_bytes_per_step": self.encoder.wire_bytes,
            "float32_bytes_per_step": 4 * n,
            "ratio": self.encoder.wire_bytes / (4 * n) if n else 0.0,
        }


class CompressedOptimizer(ReplicatedOptimizer):
    """Wrap ``optimizer``: ``step()`` applies the gradient averaged in ``compressor``'s format.
    ``error_feedback``: None for the scheme's default; random rounding is seeded by
    ``seed`` and the rank; ``allreduce``: the algorithm that sums fp16 payloads."""

    def __init__(
        self, optimizer, comm, compressor, error_feedback=None, seed=0, allreduce="auto", model=None
    ):
        super().__init__(optimizer, comm, allreduce, model)
        self.whole = FlatBuffer(optimizer.params)
        xp = get_array_module(self.whole.flat)
        encoder = GradientEncoder(
            compressor, self.whole.size, error_feedback, [seed, comm.rank], xp
        )
        self.compressed = CompressedAllreduce(comm, encoder, allreduce)

    def _average_gradients(self):
        start = time.perf_counter()
        mean = self.compressed.mean(self.whole.gather_grads(self._weight))
        self.whole.flat[...] = get_array_module(self.whole.flat).asarray(mean)
        self.whole.scatter_grads()
        self.stats["comm_seconds"] += time.perf_counter() - start
        self.stats["bytes_reduced"] += self.compressed.encoder.wire_bytes
        return [self.whole.flat]

    def compression_record(self, epoch):
        """The compression's metrics record for ``epoch`` (see ``CompressedAllreduce.record``)."""
        return self.compressed.record(epoch)
