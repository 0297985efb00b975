"""Winograd by blocks of tiles (``blocked_correlation``) against the stage-by-stage kernel and
the float64 direct convolution; the same bits on one thread and on two."""

import numpy as np
import pytest

from minidl import parallel
from minidl.conv import make_geometry
from minidl.conv import winograd as wg
from minidl.conv.function import run_backward_input, run_backward_weight, run_forward
from minidl.conv.registry import implementation

from .reference import conv2d as conv2d_reference
from .reference import conv2d_grads

LAYERS = {  # x shape, w shape, conv kwargs: row blocks, partial tiles, whole-image blocks, phases
    "row_blocks": ((3, 5, 34, 37), (7, 5, 3, 3), dict(padding=1)),
    "no_padding": ((2, 4, 41, 30), (6, 4, 3, 3), {}),
    "padding_2": ((2, 3, 19, 23), (5, 3, 3, 3), dict(padding=2)),
    "whole_images": ((9, 6, 9, 10), (4, 6, 3, 3), dict(padding=1)),
    "stride4_11x11": ((3, 3, 45, 47), (8, 3, 11, 11), dict(stride=4, padding=2)),
}


def _arrays(geom, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(
        rng.standard_normal(shape).astype(dtype)
        for shape in (geom.input_shape, geom.weight_shape, geom.output_shape)
    )


@pytest.mark.parametrize("algo", ["winograd_f2x2_3x3", "winograd_f4x4_3x3"])
@pytest.mark.parametrize("name", LAYERS)
def test_blocks_compute_the_convolution_and_its_gradients(name, algo, monkeypatch):
    """float64: the blocked passes equal the direct convolution (to rounding), and the V kept
    by the blocked forward gives the weight gradient of the stage-by-stage kernel."""
    x_shape, w_shape, kwargs = LAYERS[name]
    geom = make_geometry(x_shape, w_shape, **kwargs)
    assert wg.blocked_channels(wg.phase_geometry(geom))
    x, w, dy = _arrays(geom)
    impl = implementation(algo)
    y, saved = run_forward(impl, x, w, geom, keep=True)
    pairs = dict(stride=geom.stride, padding=geom.padding)
    np.testing.assert_allclose(y, conv2d_reference(x, w, **pairs), rtol=1e-9, atol=1e-9)
    dx = run_backward_input(impl, dy, w, geom)
    dw = run_backward_weight(impl, dy, x, geom, saved)
    dx_ref, dw_ref, _ = conv2d_grads(x, w, dy, **pairs)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(dw, dw_ref, rtol=1e-9, atol=1e-8)
    monkeypatch.setattr(wg, "BLOCK_GEMM_SIZE", 0)  # stage by stage from here
    assert not wg.blocked_channels(wg.phase_geometry(geom))
    y_stages, saved_stages = run_forward(impl, x, w, geom, keep=True)
    np.testing.assert_allclose(y, y_stages, rtol=1e-10, atol=1e-10)
    for kept, kept_stages in zip(saved, saved_stages):
        np.testing.assert_allclose(kept, kept_stages, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dx, run_backward_input(impl, dy, w, geom), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dw, run_backward_weight(impl, dy, x, geom), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["row_blocks", "whole_images"])
def test_blocks_give_the_same_bits_on_one_thread_and_on_two(name, monkeypatch):
    x_shape, w_shape, kwargs = LAYERS[name]
    geom = make_geometry(x_shape, w_shape, **kwargs)
    x, w, _ = _arrays(geom, np.float32)
    impl = implementation("winograd_f4x4_3x3")
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(parallel, "_requested", threads)
        y, saved = run_forward(impl, x, w, geom, keep=True)
        results.append((np.array(y), np.array(saved[0])))
    assert np.array_equal(results[0][0], results[1][0])
    assert np.array_equal(results[0][1], results[1][1])


@pytest.mark.parametrize("n,th,tw", [(3, 14, 14), (2, 5, 13), (9, 3, 3), (1, 1, 1), (5, 20, 70)])
def test_tile_blocks_cover_every_tile_once(n, th, tw):
    covered = np.zeros((n, th), int)
    for images, rows in wg.tile_blocks(n, th, tw):
        covered[images, rows] += 1
        tiles = (images.stop - images.start) * (rows.stop - rows.start) * tw
        assert tiles <= max(wg.BLOCK_TILES, tw)
    assert (covered == 1).all()
