"""The host buffer pool (minidl/pool.py): reuse, bounds, threads, layouts and errors."""

import math
import threading

import numpy as np
import pytest

import minidl as md
from minidl import backend
from minidl import functional as F
from minidl.conv.function import run_backward_input, run_backward_weight, run_forward
from minidl.conv.geometry import make_geometry
from minidl.conv.registry import IMPLEMENTATIONS
from minidl.pool import MIN_POOLED_BYTES, BufferPool, default_limit, size_class

MIB = 2**20


def address(a):
    return a.__array_interface__["data"][0]


def test_a_freed_block_serves_the_next_request_of_its_size_class():
    pool = BufferPool(limit=64 * MIB)
    a = pool.empty((256, 1024), np.float32)  # 1 MiB
    where = address(a)
    del a
    b = pool.empty((1024, 250), np.float32)  # 1,000 KiB: the same size class
    assert address(b) == where
    assert pool.stats()["hits"] == 1 and pool.stats()["misses"] == 1
    c = pool.empty((4 * MIB,), np.uint8)  # another class: a new block
    assert address(c) != where and pool.stats()["misses"] == 2


def test_live_arrays_never_share_a_block_and_are_aligned():
    pool = BufferPool(limit=64 * MIB)
    arrays = [pool.empty((MIB,), np.float32) for _ in range(4)]
    for i, a in enumerate(arrays):
        assert address(a) % 64 == 0 and a.flags.writeable and a.flags.c_contiguous
        for b in arrays[i + 1 :]:
            assert not np.shares_memory(a, b)


def test_a_view_keeps_the_block_leased():
    pool = BufferPool(limit=64 * MIB)
    a = pool.empty((512, 512), np.float32)
    view = a[::2].T
    del a
    assert pool.stats()["leased_bytes"] == size_class(MIB)
    del view
    assert pool.stats() | {"hits": 0, "misses": 0} == {
        "free_bytes": size_class(MIB),
        "leased_bytes": 0,
        "limit": 64 * MIB,
        "hits": 0,
        "misses": 0,
    }


def test_size_classes_waste_at_most_an_eighth():
    for n in (MIN_POOLED_BYTES, 3 * MIB + 1, 5 * 10**6, 2**31 - 7):
        assert n <= size_class(n) <= n * 1.125
    assert size_class(MIB) == MIB and size_class(MIB + 1) == MIB + MIB // 8


def test_free_blocks_stay_under_the_limit_least_recent_released_first():
    pool = BufferPool(limit=3 * MIB)
    first = pool.empty((MIB,), np.uint8)
    first_address = address(first)
    for size in (MIB, 2 * MIB):  # returned after ``first``
        pool.empty((size,), np.uint8)
    del first  # the most recent now: 1 + 2 + 1 MiB > 3 MiB, so the oldest 1 MiB block goes
    stats = pool.stats()
    assert stats["free_bytes"] == 3 * MIB and stats["leased_bytes"] == 0
    assert address(pool.empty((MIB,), np.uint8)) == first_address


def test_empty_cache_releases_every_free_block():
    a = backend.empty((2 * MIB,), np.float32, op="test")
    del a
    assert backend.pool_stats()["free_bytes"] >= 8 * MIB
    backend.empty_cache()
    assert backend.pool_stats()["free_bytes"] == 0


def test_small_arrays_and_a_zero_limit_come_from_numpy():
    pool = BufferPool(limit=0)
    assert type(pool.empty((MIB,), np.float32).base) is not type(
        BufferPool(limit=MIB).empty((MIB,), np.float32).base
    )
    assert pool.empty((MIB,), np.float32).base is None
    assert BufferPool(limit=MIB).empty((10,), np.float32).base is None
    assert pool.stats()["misses"] == 0


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("MINIDL_POOL_BYTES", "12345")
    assert default_limit() == 12345
    monkeypatch.setenv("MINIDL_POOL_BYTES", "1G")
    with pytest.raises(ValueError, match="MINIDL_POOL_BYTES='1G'.*whole number of bytes"):
        default_limit()


def test_threads_never_get_the_same_block():
    """Eight threads lease, fill with their own number, check, and drop arrays of the same
    size classes: a block handed out twice would show another thread's number."""
    pool = BufferPool(limit=16 * MIB)
    errors = []

    def work(tag):
        for _ in range(200):
            a = pool.empty((MIN_POOLED_BYTES // 4 * (1 + tag % 2),), np.float32)
            a[...] = tag
            if not (a == tag).all():
                errors.append(tag)
            del a

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = pool.stats()
    assert not errors
    assert stats["leased_bytes"] == 0 and stats["hits"] + stats["misses"] == 1600
    assert stats["misses"] <= 16  # at most one block per thread and class


def test_empty_like_keeps_the_memory_layout():
    nhwc = np.zeros((8, 32, 32, 64), np.float32).transpose(0, 3, 1, 2)  # NCHW view of NHWC
    out = backend.empty_like(nhwc, op="test")
    assert out.shape == nhwc.shape and out.strides == nhwc.strides
    half = backend.empty_like(nhwc, np.float16, op="test")
    assert half.dtype == np.float16 and half.strides == tuple(s // 2 for s in nhwc.strides)


def test_an_array_larger_than_the_memory_is_refused_naming_op_shape_and_size():
    with pytest.raises(
        MemoryError, match=r"im2col columns: .* \(1099511627776,\) \(float32\) needs 4.0 TiB"
    ):
        backend.empty((2**40,), np.float32, op="im2col columns")
    # a convolution of a (zero-strided) 30 TB input: the first large temporary says which
    x = np.broadcast_to(np.float32(1), (100_000, 64, 1024, 1024))
    w = np.ones((8, 64, 3, 3), np.float32)
    with pytest.raises(
        MemoryError,
        match=r"im2col output: an array of shape \(104857600000, 8\) \(float32\) needs 3.1 TiB",
    ):
        F.conv2d(md.Tensor(x), md.Tensor(w), padding=1, algo="im2col")


@pytest.mark.parametrize("algo", ["direct", "im2col", "winograd_f4x4_3x3", "fft"])
def test_stale_pool_memory_never_reaches_a_result(algo, monkeypatch):
    """Every pass gives the same bits from blocks full of NaN as from fresh NumPy arrays."""
    geom = make_geometry((8, 16, 24, 24), (32, 16, 3, 3), padding=1)
    rng = np.random.default_rng(0)
    x, w, dy = (
        rng.standard_normal(s).astype(np.float32)
        for s in (geom.input_shape, geom.weight_shape, geom.output_shape)
    )
    impl = IMPLEMENTATIONS[algo]

    def passes():
        return [
            run_forward(impl, x, w, geom)[0].copy(),
            run_backward_input(impl, dy, w, geom).copy(),
            run_backward_weight(impl, dy, x, geom).copy(),
        ]

    monkeypatch.setattr(backend.HOST_POOL, "limit", 0)
    fresh = passes()
    monkeypatch.setattr(backend.HOST_POOL, "limit", 256 * MIB)
    backend.empty_cache()
    passes()  # lease the blocks these passes use, then poison them
    sizes = [MIN_POOLED_BYTES]
    while sizes[-1] < 4 * MIB:  # every size class up to 4 MiB, one block each
        sizes.append(size_class(sizes[-1] + 1))
    poisoned = [backend.empty((n,), np.uint8) for n in sizes]
    for block in poisoned:
        block[...] = 0xFF  # NaN in float32 and float64
    del poisoned, block
    for want, got in zip(fresh, passes()):
        np.testing.assert_array_equal(got, want)
    backend.empty_cache()


def test_training_steps_reach_a_steady_state_with_no_new_blocks():
    """After the first steps, every large array of a LeNet step reuses a cached block: no
    misses, and no growth of the cache, step after step (the memory stays bounded)."""
    md.manual_seed(0)
    model = md.models.lenet5()
    opt = md.optim.Momentum(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 64)

    def step():
        loss = F.cross_entropy(model(md.tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(3):  # the autotuner's trials, the first leases
        step()
    before = backend.pool_stats()
    for _ in range(5):
        step()
    after = backend.pool_stats()
    assert after["misses"] == before["misses"] and after["hits"] > before["hits"]
    assert after["free_bytes"] == before["free_bytes"] <= after["limit"]
    assert after["leased_bytes"] == before["leased_bytes"]


def _plain_updates(name, w, grads, lr, wd):
    """The update rules as whole-array NumPy expressions (a new array per operation)."""
    b = m = v = None
    for t, g in enumerate(grads, start=1):
        g = g + wd * w
        if name == "sgd":
            w = w - lr * g
        elif name in ("momentum", "nesterov"):
            b = g.copy() if b is None else b * 0.9 + g
            w = w - lr * (b if name == "momentum" else g + 0.9 * b)
        else:  # adam
            m = (0.0 if m is None else m * 0.9) + (1 - 0.9) * g
            v = (0.0 if v is None else v * 0.999) + (1 - 0.999) * (g * g)
            w = w - (lr / (1 - 0.9**t)) * m / (np.sqrt(v) * (1.0 / math.sqrt(1 - 0.999**t)) + 1e-8)
    return w


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov", "adam"])
def test_updates_in_pooled_scratch_give_the_bits_of_the_plain_formula(name):
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((300, 400)).astype(np.float32)  # 469 KiB: pooled
    grads = [rng.standard_normal(w0.shape).astype(np.float32) for _ in range(3)]
    p = md.Tensor(w0.copy(), requires_grad=True)
    opt = {
        "sgd": lambda: md.optim.SGD([p], lr=0.1, weight_decay=0.01),
        "momentum": lambda: md.optim.Momentum([p], lr=0.1, momentum=0.9, weight_decay=0.01),
        "nesterov": lambda: md.optim.Nesterov([p], lr=0.1, momentum=0.9, weight_decay=0.01),
        "adam": lambda: md.optim.Adam([p], lr=0.1, weight_decay=0.01),
    }[name]()
    for g in grads:
        p.grad = g
        opt.step()
    np.testing.assert_array_equal(p.data, _plain_updates(name, w0, grads, 0.1, 0.01))
