"""Every algorithm, every pass (y, dx, dw, db), against the float64 definition and PyTorch.

Errors are max|mine - ref| / max|ref| over the whole array. Tolerances per
algorithm in float32 (unit roundoff 6e-8), each ~10x above the largest error
seen over many random shapes:
- direct, im2col: plain sums of products, ~1e-7 typical; 1e-5 allows sums of
  tens of thousands of terms in another order (dw sums over N*OH*OW).
- fft: the transforms add O(log L) roundings of the whole spectrum, ~2e-7; 1e-5.
- winograd F(2x2,3x3): transform entries 1/2 and 1, ~2e-7; 1e-5.
- the textbook versions (``*_reference``) round as their tuned twins (F(2x2) for Winograd).
- winograd F(4x4,3x3): entries up to 8 and 1/24 amplify rounding (Ben-Nun
  & Hoefler 2019, §4.3: "the numerical accuracy of Winograd convolution is generally lower"),
  ~5e-6 seen; 1e-4.
In float64 every algorithm must agree with the definition to 1e-10: that
checks the formulas (transform matrices, padding, cropping, flips) exactly.
"""

import numpy as np
import pytest

import minidl as md
import minidl.reference  # registers the textbook algorithms, tested here too
from minidl.conv.registry import IMPLEMENTATIONS

from . import reference

FLOAT32_TOLERANCE = {
    "direct": 1e-5,
    "im2col": 1e-5,
    "fft": 1e-5,
    "winograd_f2x2_3x3": 1e-5,
    "winograd_f4x4_3x3": 1e-4,
    "direct_reference": 1e-5,
    "im2col_reference": 1e-5,
    "fft_reference": 1e-5,
    "winograd_reference": 1e-5,
}
ALGOS = tuple(IMPLEMENTATIONS)

# (N, C, H, W, K, (KH, KW), stride, padding, dilation, groups)
SHAPES = {
    "odd_3x3": (2, 3, 9, 11, 4, (3, 3), 1, 1, 1, 1),
    "batch1_valid": (1, 2, 7, 7, 3, (3, 3), 1, 0, 1, 1),
    "pad3": (2, 3, 10, 9, 5, (3, 3), 1, 3, 1, 1),
    "stride2": (2, 3, 12, 13, 4, (3, 3), 2, 1, 1, 1),
    "dilation2": (2, 3, 12, 13, 4, (3, 3), 1, 2, 2, 1),
    "groups2": (2, 4, 9, 10, 6, (3, 3), 1, 1, 1, 2),
    "groups3_1x3": (2, 6, 5, 7, 9, (1, 3), 1, (0, 1), 1, 3),
    "1x1": (3, 4, 8, 8, 2, (1, 1), 1, 0, 1, 1),
    "11x11_s4": (2, 3, 27, 29, 4, (11, 11), 4, 2, 1, 1),
    "5x5_lenet": (3, 1, 14, 14, 3, (5, 5), 1, 2, 1, 1),
    "nonsquare": (2, 3, 12, 13, 4, (3, 5), (1, 2), (1, 2), 1, 1),
    "mixed_s_d": (2, 2, 13, 11, 3, (2, 3), (2, 1), (1, 0), (2, 1), 1),
    "3x3_large_c": (2, 24, 10, 10, 20, (3, 3), 1, 1, 1, 1),
    "5x5_s2_odd": (2, 3, 13, 12, 4, (5, 5), 2, 2, 1, 1),  # Winograd via space-to-depth
    "7x7_s3": (1, 2, 17, 16, 3, (7, 7), 3, 1, 1, 1),
    "wide_stride2": (2, 16, 11, 10, 8, (3, 3), 2, 1, 1, 1),  # im2col: NHWC gather and col2im
    "wide_more_out": (2, 16, 9, 9, 24, (3, 3), 1, 1, 1, 1),
}


def make_case(shape, dtype, seed):
    n, c, h, w, k, kernel, stride, padding, dilation, groups = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((k, c // groups) + kernel).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return x, wt, b, params


def pairs(params):
    return {
        k: (v if k == "groups" else ((v, v) if isinstance(v, int) else v))
        for k, v in params.items()
    }


def run_minidl(x, w, b, params, algo, dy_seed=5):
    """y, dx, dw, db from minidl's conv2d with an explicit algorithm."""
    tx, tw, tb = (md.tensor(a, requires_grad=True, dtype=a.dtype.name) for a in (x, w, b))
    y = md.conv.conv2d(tx, tw, tb, algo=algo, **params)
    dy = np.random.default_rng(dy_seed).standard_normal(y.shape).astype(x.dtype)
    y.backward(md.tensor(dy, dtype=x.dtype.name))
    return y.numpy(), tx.grad, tw.grad, tb.grad, dy


def rel_error(mine, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(mine, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def skip_unsupported(algo, x, w, params):
    geom = md.conv.make_geometry(x.shape, w.shape, **params)
    reason = IMPLEMENTATIONS[algo].unsupported(geom.per_group())
    if reason:
        pytest.skip(f"{algo}: {reason}")


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("name", SHAPES)
def test_float32_against_float64_definition_and_torch(algo, name):
    torch = pytest.importorskip("torch")
    x, w, b, params = make_case(SHAPES[name], np.float32, seed=len(name))
    skip_unsupported(algo, x, w, params)
    y, dx, dw, db, dy = run_minidl(x, w, b, params, algo)
    ref_y = reference.conv2d(x, w, b, **pairs(params))
    ref_dx, ref_dw, ref_db = reference.conv2d_grads(x, w, dy, **pairs(params))
    tol = FLOAT32_TOLERANCE[algo]
    for label, mine, ref in (
        ("y", y, ref_y),
        ("dx", dx, ref_dx),
        ("dw", dw, ref_dw),
        ("db", db, ref_db),
    ):
        assert mine.shape == ref.shape, f"{label}: shape {mine.shape} != {ref.shape}"
        assert mine.dtype == np.float32, f"{label}: dtype {mine.dtype}"
        assert rel_error(mine, ref) < tol, (
            f"{algo} {name} {label}: error {rel_error(mine, ref):.2e}"
        )

    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, **params)
    ty.backward(torch.tensor(dy))
    for label, mine, ref in (
        ("y", y, ty),
        ("dx", dx, tx.grad),
        ("dw", dw, tw.grad),
        ("db", db, tb.grad),
    ):
        err = rel_error(mine, ref.detach().numpy())
        assert err < tol, f"{algo} {name} {label} vs PyTorch: error {err:.2e}"


@pytest.mark.parametrize("one_image_chunks", [False, True])
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("name", SHAPES)
def test_float64_matches_definition_exactly(algo, name, one_image_chunks, monkeypatch):
    if one_image_chunks:  # every chunked loop runs image by image
        monkeypatch.setattr("minidl.chunks.CHUNK_BYTES", 1)
    x, w, b, params = make_case(SHAPES[name], np.float64, seed=3 * len(name))
    skip_unsupported(algo, x, w, params)
    y, dx, dw, db, dy = run_minidl(x, w, b, params, algo)
    ref_dx, ref_dw, ref_db = reference.conv2d_grads(x, w, dy, **pairs(params))
    for label, mine, ref in (
        ("y", y, reference.conv2d(x, w, b, **pairs(params))),
        ("dx", dx, ref_dx),
        ("dw", dw, ref_dw),
        ("db", db, ref_db),
    ):
        assert mine.dtype == np.float64
        assert rel_error(mine, ref) < 1e-10, f"{algo} {name} {label}: {rel_error(mine, ref):.2e}"


@pytest.mark.parametrize("algo", ALGOS)
def test_without_bias_and_without_input_gradient(algo):
    """The first layer of a net: no bias, input does not require grad (dx is never computed)."""
    x, w, _, params = make_case(SHAPES["odd_3x3"], np.float32, seed=11)
    tx = md.tensor(x)
    tw = md.tensor(w, requires_grad=True)
    y = md.conv.conv2d(tx, tw, None, algo=algo, **params)
    dy = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    y.backward(md.tensor(dy))
    ref_dx, ref_dw, _ = reference.conv2d_grads(x, w, dy, **pairs(params))
    assert tx.grad is None
    assert rel_error(y.numpy(), reference.conv2d(x, w, **pairs(params))) < FLOAT32_TOLERANCE[algo]
    assert rel_error(tw.grad, ref_dw) < FLOAT32_TOLERANCE[algo]


def test_winograd_f4x4_is_less_accurate_than_f2x2():
    """Ben-Nun & Hoefler 2019, §4.3: accuracy drops with the tile; over 20 random float32
    problems F(4x4) errs more."""
    ratios = []
    for seed in range(20):
        x, w, b, params = make_case((2, 16, 12, 12, 8, (3, 3), 1, 1, 1, 1), np.float32, seed)
        ref = reference.conv2d(x, w, b, **pairs(params))
        errors = {}
        for algo in ("winograd_f2x2_3x3", "winograd_f4x4_3x3"):
            y = md.conv.conv2d(md.tensor(x), md.tensor(w), md.tensor(b), algo=algo, **params)
            errors[algo] = rel_error(y.numpy(), ref)
        ratios.append(errors["winograd_f4x4_3x3"] / errors["winograd_f2x2_3x3"])
    assert np.median(ratios) > 3, f"median F(4x4)/F(2x2) error ratio {np.median(ratios):.2f}"
    assert min(ratios) > 1, f"F(4x4) was as accurate as F(2x2) on some input: {min(ratios):.2f}"


@pytest.mark.gpu
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("name", ["odd_3x3", "stride2", "groups2", "11x11_s4"])
def test_gpu_matches_cpu(algo, name):
    """The same xp code on CuPy: values and gradients equal the CPU's to float32 rounding."""
    from minidl import backend

    if not backend.cuda_available():
        pytest.skip("needs CuPy and an NVIDIA GPU")
    x, w, b, params = make_case(SHAPES[name], np.float32, seed=7)
    skip_unsupported(algo, x, w, params)
    results = {}
    for device in ("cpu", "cuda"):
        tx, tw, tb = (md.tensor(a, requires_grad=True, device=device) for a in (x, w, b))
        y = md.conv.conv2d(tx, tw, tb, algo=algo, **params)
        dy = np.random.default_rng(3).standard_normal(y.shape).astype(np.float32)
        y.backward(md.tensor(dy, device=device))
        results[device] = [backend.to_numpy(a) for a in (y.data, tx.grad, tw.grad, tb.grad)]
    for label, gpu, cpu in zip(("y", "dx", "dw", "db"), results["cuda"], results["cpu"]):
        assert rel_error(gpu, cpu) < FLOAT32_TOLERANCE[algo], f"{algo} {name} {label}"


@pytest.mark.parametrize("algo", ALGOS)
def test_channels_last_and_strided_arrays(algo):
    """Inputs and output gradients that are views (channels-last memory, slices) give the
    same results."""
    x, w, b, params = make_case(SHAPES["odd_3x3"], np.float64, seed=21)
    skip_unsupported(algo, x, w, params)
    geom = md.conv.make_geometry(x.shape, w.shape, **params)
    impl = IMPLEMENTATIONS[algo]
    dy = np.random.default_rng(4).standard_normal(geom.output_shape)
    x_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    dy_last = np.ascontiguousarray(dy.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    x_sliced = np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 2)))[:, :, :, 1:-2]
    ref_dx, ref_dw, _ = reference.conv2d_grads(x, w, dy, **pairs(params))
    ref_y = reference.conv2d(x, w, **pairs(params))
    for xv, dyv in ((x_last, dy_last), (x_sliced, dy_last[:, :, :, :])):
        y, saved = impl.forward(xv, w, geom, keep=True)
        assert rel_error(y, ref_y) < 1e-10
        assert rel_error(impl.backward_input(dyv, w, geom, saved), ref_dx) < 1e-10
        assert rel_error(impl.backward_weight(dyv, xv, geom, saved), ref_dw) < 1e-10
        assert rel_error(impl.backward_weight(dyv, xv, geom), ref_dw) < 1e-10
