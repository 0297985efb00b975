"""minidl/parallel.py: chunks on threads, with the same results at any thread count.

Oracles: the chunks run in order on one thread (the definition of ``parallel_for``), the
float64 conv2d of tests/conv/reference.py, and exact invariants (order, errors, no
deadlock, a forked child that works).
"""

import os
import threading
import time

import numpy as np
import pytest

from minidl import backend, chunks, parallel
from minidl.conv.geometry import make_geometry
from minidl.conv.im2col import IM2COL
from tests.conv import reference

THREADS = (1, 2, 3)


@pytest.fixture
def threads():
    """Set parallel's thread count inside a test; restored afterwards."""
    yield parallel.set_num_threads
    parallel.set_num_threads(None)


def finishes(fn, seconds=60):
    """Run fn on a thread; True when it returned within ``seconds`` (else it deadlocked)."""
    worker = threading.Thread(target=fn, daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


@pytest.mark.parametrize("n", THREADS)
def test_results_come_back_in_the_chunks_order(threads, n):
    threads(n)
    chunks_ = [slice(i, i + 3) for i in range(0, 30, 3)]
    seen = []
    out = parallel.parallel_for(lambda s: seen.append(s.start) or s.start * 10, chunks_)
    assert out == [s.start * 10 for s in chunks_]
    assert sorted(seen) == [s.start for s in chunks_]  # every chunk exactly once


def test_a_failing_chunk_raises_in_the_caller_naming_the_chunk(threads):
    threads(2)

    def fn(i):
        if i == 5:
            raise ValueError("bad chunk")
        time.sleep(0.001)
        return i

    with pytest.raises(ValueError, match="bad chunk") as info:
        parallel.parallel_for(fn, range(8))
    assert any("chunk 5 of 8" in note for note in info.value.__notes__)
    assert parallel.parallel_for(lambda i: i, range(4)) == [0, 1, 2, 3]  # the pool still works


def test_a_nested_call_runs_inline_without_deadlock(threads):
    threads(2)
    result = []

    def outer(i):
        inner = parallel.parallel_for(lambda j: (threading.get_ident(), j), range(3))
        assert len({ident for ident, _ in inner}) == 1  # all on this chunk's thread
        return sum(j for _, j in inner) + i

    assert finishes(lambda: result.append(parallel.parallel_for(outer, range(4))))
    assert result == [[3, 4, 5, 6]]


def test_calls_from_several_user_threads_at_once(threads):
    threads(2)
    results, errors = {}, []

    def user(k):
        try:
            for _ in range(20):
                out = parallel.parallel_for(lambda i: i * k, range(6))
                assert out == [i * k for i in range(6)]
            results[k] = True
        except Exception as exc:  # reported below
            errors.append(exc)

    users = [threading.Thread(target=user, args=(k,)) for k in range(4)]
    assert finishes(lambda: [t.start() for t in users] and [t.join() for t in users])
    assert not errors and len(results) == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_threads(threads):
    threads(2)
    parallel.parallel_for(lambda i: i, range(4))  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # the child: the parent's workers are not here
        ok = parallel.parallel_for(lambda i: i * i, range(6)) == [0, 1, 4, 9, 16, 25]
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("parallel_for in a forked child did not finish (deadlock)")
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_blas_thread_count_comes_back_after_a_call(threads):
    threads(2)
    before = [lib.get_num_threads() for lib in parallel._blas_libraries()]
    seen = parallel.parallel_for(
        lambda i: [lib.get_num_threads() for lib in parallel._blas_libraries()], range(4)
    )
    assert all(counts == [1] * len(before) for counts in seen)  # one BLAS thread per chunk
    assert [lib.get_num_threads() for lib in parallel._blas_libraries()] == before


def test_bad_thread_counts_are_refused(threads, monkeypatch):
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="positive int"):
            backend.set_num_threads(bad)
    monkeypatch.setenv("MINIDL_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="MINIDL_NUM_THREADS='two'"):
        parallel.get_num_threads()
    monkeypatch.setenv("MINIDL_NUM_THREADS", "3")
    assert parallel.get_num_threads() == 3
    backend.set_num_threads(1)
    assert backend.get_num_threads() == 1


LAYERS = {  # x shape, w shape, stride, padding: both im2col layouts, both input gradients
    "NHWC columns, col2im": ((7, 8, 9, 9), (5, 8, 3, 3), 2, 1),
    "batch-innermost columns": ((9, 1, 12, 12), (4, 1, 5, 5), 1, 2),
    "batch-innermost col2im": ((9, 3, 11, 11), (6, 3, 3, 3), 2, 0),
}


@pytest.mark.parametrize("layer", LAYERS)
def test_im2col_has_the_same_bits_on_1_2_and_3_threads(threads, monkeypatch, layer):
    """Every chunk on threads (``SHARED_MIN_BYTES`` 0) and a few images a chunk: the three
    passes give the same bits at every thread count, and match the float64 definition."""
    monkeypatch.setattr(chunks, "SHARED_MIN_BYTES", 0)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 4096)  # 1-3 images a chunk
    x_shape, w_shape, stride, padding = LAYERS[layer]
    geom = make_geometry(x_shape, w_shape, stride, padding)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    dy = rng.standard_normal(geom.output_shape).astype(np.float32)
    assert len(chunks.batch_chunks(geom.batch, 4096, x)) > 3
    results = {}
    for n in THREADS:
        threads(n)
        y, saved = IM2COL.forward(x, w, geom, keep=True)
        results[n] = [
            np.array(y),
            IM2COL.backward_weight(dy, x, geom, saved),
            IM2COL.backward_weight(dy, x, geom),  # columns gathered again
            np.array(IM2COL.backward_input(dy, w, geom)),
        ]
    for n in THREADS[1:]:
        for a, b in zip(results[1], results[n]):
            assert a.tobytes() == b.tobytes()
    y, dw, dw_again, dx = results[1]
    s, p = (stride, stride), (padding, padding)
    dx64, dw64, _ = reference.conv2d_grads(x, w, dy, stride=s, padding=p)
    np.testing.assert_allclose(y, reference.conv2d(x, w, stride=s, padding=p), atol=1e-4)
    for grad in (dw, dw_again):  # one product of all kept columns, or one per chunk
        np.testing.assert_allclose(grad, dw64, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dx, dx64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", THREADS)
def test_relu_by_rows_on_threads_is_its_definition(threads, monkeypatch, n):
    """Rows on threads (``ELEMENTWISE_MIN_BYTES`` 0), a channels-last input: max(x, 0) and
    g * (y > 0), bit for bit."""
    import minidl as md
    from minidl import functional as F

    monkeypatch.setattr(chunks, "ELEMENTWISE_MIN_BYTES", 0)
    threads(n)
    rng = np.random.default_rng(1)
    data = rng.standard_normal((6, 5, 4, 3)).astype(np.float32).transpose(0, 3, 1, 2)
    x = md.tensor(data, requires_grad=True)
    g = rng.standard_normal(data.shape).astype(np.float32)
    y = F.relu(x)
    y.backward(g)
    assert y.data.tobytes() == np.maximum(data, 0).tobytes()
    assert x.grad.tobytes() == (g * (data > 0)).tobytes()


@pytest.mark.parametrize("rule", ["Momentum", "Adam"])
def test_optimizer_steps_have_the_same_bits_on_1_2_and_3_threads(threads, monkeypatch, rule):
    """Parameters updated on threads (``SHARED_MIN_BYTES`` 0), three steps with weight decay."""
    import minidl as md
    from minidl import optim

    monkeypatch.setattr(chunks, "SHARED_MIN_BYTES", 0)
    shapes = [(7, 5), (5,), (3, 2, 3, 3), (11,)]
    results = []
    for n in THREADS:
        threads(n)
        rng = np.random.default_rng(2)
        params = [
            md.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in shapes
        ]
        opt = getattr(optim, rule)(params, lr=0.1, weight_decay=0.01)
        for _ in range(3):
            for p in params:
                p.grad = rng.standard_normal(p.shape).astype(np.float32)
            opt.step()
        results.append([p.data.tobytes() for p in params])
    assert results[1] == results[0] and results[2] == results[0]


POOLS = {  # op, kernel, stride, padding: overlapping windows with padding, and tiling ones
    "max 3/2 pad 1": ("max_pool2d", 3, 2, 1),
    "max 2/2 tiles": ("max_pool2d", 2, 2, 0),
    "avg 3/2 pad 1": ("avg_pool2d", 3, 2, 1),
}


@pytest.mark.parametrize("pool", POOLS)
def test_pooling_has_the_same_bits_on_1_2_and_3_threads(threads, monkeypatch, pool):
    """Images in pieces on threads (``ELEMENTWISE_MIN_BYTES`` 0): forward and input gradient
    bit for bit as on one thread (ties included: a coarse grid of values)."""
    import minidl as md
    from minidl import functional as F

    monkeypatch.setattr(chunks, "ELEMENTWISE_MIN_BYTES", 0)
    op, kernel, stride, padding = POOLS[pool]
    rng = np.random.default_rng(3)
    data = rng.integers(-3, 4, (9, 4, 8, 8)).astype(np.float32)  # many ties
    g = rng.standard_normal((9, 4, 4, 4)).astype(np.float32)
    results = []
    for n in THREADS:
        threads(n)
        x = md.tensor(data, requires_grad=True)
        y = getattr(F, op)(x, kernel, stride, padding)
        y.backward(g)
        results.append((y.data.tobytes(), x.grad.tobytes()))
    assert results[1] == results[0] and results[2] == results[0]


@pytest.mark.parametrize("shape", [(512, 784, 256), (96, 4096, 1024), (16, 2048, 4096)])
def test_a_cut_product_is_the_product_with_the_same_bits_on_1_2_and_3_threads(threads, shape):
    """``gemm`` cuts a large product by its shape alone (rows, or columns when the output is
    wide); BLAS on one thread, every count gives the bits of one thread, and the float64
    product within float32's rounding."""
    m, k, n = shape
    assert 2 * m * k * n >= 2 * chunks.GEMM_PIECE_FLOPS  # large enough to be cut
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    results = []
    with backend.limit_threads(1):
        for n_threads in THREADS:
            threads(n_threads)
            results.append(chunks.gemm(a, b))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(results[0] - exact).max() < 1e-5 * np.abs(a).max() * np.abs(b).max() * k
    for result in results[1:]:
        assert np.array_equal(result, results[0])
    out = np.empty((n, m), np.float32).T  # a strided output: the cut writes into it
    assert chunks.gemm(a, b, out=out) is out and np.array_equal(out, results[0])
