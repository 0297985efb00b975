"""Operation counts (Ben-Nun & Hoefler 2019, Table 6 / App. B, with correct multiplicities)
and workspace sizes."""

import tracemalloc

import numpy as np
import pytest

from minidl import parallel
from minidl.chunks import batch_chunks
from minidl.conv import PASSES, make_geometry, multiplies, winograd, workspace_bytes
from minidl.conv.function import run_backward_input, run_backward_weight, run_forward
from minidl.conv.registry import IMPLEMENTATIONS, implementation
from minidl.conv.winograd import tile_elements
from minidl.pool import HOST_POOL

LAYERS = {  # name: (x shape, w shape, conv kwargs)
    "lenet_conv2": ((64, 6, 14, 14), (16, 6, 5, 5), {}),
    "alexnet_conv1": ((16, 3, 224, 224), (64, 3, 11, 11), dict(stride=4, padding=2)),
    "vgg_3x3": ((16, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    "grouped": ((2, 8, 13, 13), (12, 4, 3, 3), dict(padding=1, groups=2)),
}


@pytest.mark.parametrize("name", LAYERS)
def test_direct_and_im2col_count_the_definition(name):
    x, w, kw = LAYERS[name]
    geom = make_geometry(x, w, **kw)
    n, c = x[:2]
    k, _, r, s = w
    expected = n * k * (c // geom.groups) * r * s * geom.out_h * geom.out_w
    assert multiplies("direct", geom)["total"] == expected
    assert multiplies("im2col", geom)["total"] == expected


@pytest.mark.parametrize("algo,ratio", [("winograd_f2x2_3x3", 2.25), ("winograd_f4x4_3x3", 4.0)])
def test_winograd_elementwise_stage_saves_the_known_factor(algo, ratio):
    """Lavin & Gray: F(2x2,3x3) uses 16 multiplies per 4 outputs instead of 36; F(4x4,3x3)
    36 per 16."""
    geom = make_geometry(*LAYERS["vgg_3x3"][:2], padding=1)  # 56x56: whole tiles for m = 2 and 4
    direct = multiplies("direct", geom)["total"]
    counts = multiplies(algo, geom)
    assert direct / counts["elementwise"] == ratio
    assert counts["total"] == sum(v for k, v in counts.items() if k != "total")
    assert counts["total"] < direct  # transforms included, still fewer multiplies


def test_winograd_counts_partial_tiles():
    """A 13x13 output needs ceil(13/4)^2 = 16 F(4x4) tiles per image: the wasted outputs count."""
    geom = make_geometry((2, 8, 13, 13), (4, 8, 3, 3), padding=1)
    assert multiplies("winograd_f4x4_3x3", geom)["elementwise"] == 36 * 4 * 8 * (2 * 16)


def test_fft_pointwise_count_does_not_grow_with_the_kernel():
    small = make_geometry((4, 8, 28, 28), (8, 8, 3, 3), padding=1)
    large = make_geometry((4, 8, 28, 28), (8, 8, 9, 9), padding=1)  # same padded size
    assert multiplies("fft", small)["pointwise"] == multiplies("fft", large)["pointwise"]
    lh = lw = 30  # the fast FFT length for 28 + 2 (5 * 3 * 2)
    assert multiplies("fft", small)["pointwise"] == 4 * 4 * 8 * 8 * lh * (lw // 2 + 1)
    assert multiplies("direct", large)["total"] > 5 * multiplies("direct", small)["total"]


@pytest.fixture(autouse=True)
def no_buffer_pool(monkeypatch):
    """The estimates count every temporary as allocated and freed: the buffer pool's
    cached blocks would hide them, so it caches nothing here (limit 0)."""
    monkeypatch.setattr(HOST_POOL, "limit", 0)
    HOST_POOL.clear()


def _traced_peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("algo", tuple(IMPLEMENTATIONS))
@pytest.mark.parametrize("pass_", PASSES)
def test_workspace_estimate_bounds_the_measured_peak(algo, pass_):
    """NumPy reports its buffers to tracemalloc: the estimate must cover each pass's peak."""
    rng = np.random.default_rng(0)
    geom = make_geometry((4, 16, 20, 20), (24, 16, 3, 3), padding=1)
    x = rng.standard_normal(geom.input_shape).astype(np.float32)
    w = rng.standard_normal(geom.weight_shape).astype(np.float32)
    dy = rng.standard_normal(geom.output_shape).astype(np.float32)
    impl = implementation(algo)
    run = {
        "forward": lambda: run_forward(impl, x, w, geom),
        "backward_input": lambda: run_backward_input(impl, dy, w, geom),
        "backward_weight": lambda: run_backward_weight(impl, dy, x, geom),
    }[pass_]
    run()  # warm caches (transform matrices, FFT plans)
    result_bytes = {"forward": dy.nbytes, "backward_input": x.nbytes, "backward_weight": w.nbytes}
    peak = _traced_peak(run) - result_bytes[pass_]
    estimate = workspace_bytes(algo, geom, pass_)
    assert peak <= 1.25 * estimate + 65536, f"{algo} {pass_}: peak {peak} > estimate {estimate}"
    assert estimate <= 4 * peak + 65536, (
        f"{algo} {pass_}: estimate {estimate} far above peak {peak}"
    )


def test_im2col_works_in_chunks_but_keeps_the_whole_column_matrix():
    """One image of columns (7.2 MB) at a time; forward(keep=True) holds all 16 (115.6 MB)."""
    geom = make_geometry(*LAYERS["vgg_3x3"][:2], padding=1)
    cols = 16 * 56 * 56 * 64 * 9 * 4
    assert cols / 16 <= workspace_bytes("im2col", geom, "forward") < 1.5 * cols / 16
    assert implementation("im2col").saved_bytes(geom) == cols
    wide = make_geometry((16, 64, 56, 56), (64, 64, 7, 7), padding=3)  # same output size
    assert workspace_bytes("direct", wide, "forward") < 1.2 * workspace_bytes(
        "direct", geom, "forward"
    )
    assert workspace_bytes("im2col", wide, "forward") > 4 * workspace_bytes(
        "im2col", geom, "forward"
    )


WINOGRAD_LAYERS = {  # (x shape, w shape, conv kwargs): a batch in several chunks, partial tiles,
    "chunked": ((64, 16, 32, 32), (16, 16, 3, 3), dict(padding=1)),  # a strided kernel
    "partial_tiles": ((48, 8, 30, 29), (24, 8, 3, 3), dict(padding=1)),
    "stride4_11x11": ((16, 3, 64, 64), (8, 3, 11, 11), dict(stride=4, padding=2)),
}


@pytest.mark.parametrize("name", WINOGRAD_LAYERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("algo", ["winograd_f2x2_3x3", "winograd_f4x4_3x3"])
def test_winograd_workspace_is_what_the_kernel_allocates(algo, dtype, name, monkeypatch):
    """The estimate follows the kernel's chunks for the dtype's item size: it is the traced peak
    (stage by stage: these few-channel layers otherwise go by blocks, tested below; on one
    thread: a second thread's copies move the traced peak by ~1.2 MB)."""
    monkeypatch.setattr(winograd, "BLOCK_GEMM_SIZE", 0)
    monkeypatch.setattr(parallel, "_requested", 1)
    x_shape, w_shape, kwargs = WINOGRAD_LAYERS[name]
    geom = make_geometry(x_shape, w_shape, **kwargs)
    rng = np.random.default_rng(1)
    x, w, dy = (
        rng.standard_normal(shape).astype(dtype)
        for shape in (geom.input_shape, geom.weight_shape, geom.output_shape)
    )
    impl = implementation(algo)
    if name == "chunked":  # the gathered input tiles of the batch exceed one chunk
        per_image = tile_elements(impl.alpha, 8 * 8 if impl.m == 4 else 16 * 16, 16)
        assert len(batch_chunks(64, per_image * x.itemsize, x)) > 1
    runs = {
        "forward": (lambda: run_forward(impl, x, w, geom), dy.nbytes),
        "backward_input": (lambda: run_backward_input(impl, dy, w, geom), x.nbytes),
        "backward_weight": (lambda: run_backward_weight(impl, dy, x, geom), w.nbytes),
    }
    for pass_, (run, result_bytes) in runs.items():
        run()  # the cached transform matrices
        measured = _traced_peak(run) - result_bytes
        estimate = workspace_bytes(algo, geom, pass_, dtype)
        assert abs(measured - estimate) <= 0.01 * estimate + 4096, (pass_, measured, estimate)


@pytest.mark.parametrize("name", WINOGRAD_LAYERS)
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_winograd_workspace_bounds_its_peak(name, threads, monkeypatch):
    """By blocks, the peak depends on when the threads' blocks overlap: the estimate (every
    thread holding a block) covers it, and is not far above it."""
    monkeypatch.setattr(parallel, "_requested", threads)
    x_shape, w_shape, kwargs = WINOGRAD_LAYERS[name]
    geom = make_geometry(x_shape, w_shape, **kwargs)
    assert winograd.blocked_channels(winograd.phase_geometry(geom))
    rng = np.random.default_rng(1)
    x, w, dy = (
        rng.standard_normal(shape).astype(np.float32)
        for shape in (geom.input_shape, geom.weight_shape, geom.output_shape)
    )
    impl = implementation("winograd_f4x4_3x3")
    runs = {
        "forward": (lambda: run_forward(impl, x, w, geom), dy.nbytes),
        "backward_input": (lambda: run_backward_input(impl, dy, w, geom), x.nbytes),
    }
    for pass_, (run, result_bytes) in runs.items():
        run()
        measured = _traced_peak(run) - result_bytes
        estimate = workspace_bytes("winograd_f4x4_3x3", geom, pass_)
        assert measured <= 1.05 * estimate + 4096, (pass_, measured, estimate)
        assert estimate <= 1.5 * measured, (pass_, measured, estimate)


def test_a_gpu_batch_is_one_chunk():
    """On a GPU the kernels take the whole batch at once (``minidl/chunks.py``): more workspace."""
    geom = make_geometry(*WINOGRAD_LAYERS["chunked"][:2], padding=1)
    for algo in ("im2col", "winograd_f4x4_3x3"):
        on_cpu = [workspace_bytes(algo, geom, pass_) for pass_ in PASSES]
        on_gpu = [workspace_bytes(algo, geom, pass_, device="cuda") for pass_ in PASSES]
        assert all(g >= c for g, c in zip(on_gpu, on_cpu)) and on_gpu != on_cpu, algo
