"""Checks of the perf exercises: counts and costs against ``minidl.perf``."""

import numpy as np

from minidl import layers as L
from minidl.exercises import exercise, expect_close, expect_equal
from minidl.exercises.checks.tuned import forbids
from minidl.perf import allreduce_cost as tuned_allreduce_cost
from minidl.perf import compute_model as tuned_compute_model
from minidl.perf import count_model
from minidl.perf import model_costs as tuned_model_costs
from minidl.perf import network as tuned_network
from minidl.perf import predict as tuned_predict
from minidl.perf.allreduce_cost import CostParams, predict
from minidl.perf.compute_model import StepTime
from minidl.perf.network import Network, comm_time
from minidl.perf.predict import predict_scaling
from minidl.reference.perf.allreduce_cost import butterfly_allreduce_time, ring_allreduce_time
from minidl.reference.perf.scaling import amdahl_speedup, efficiency, iteration_time, speedup
from minidl.reference.perf.work_depth import conv2d_work_depth

# (N, C_in, H, W), C_out, kernel, stride, padding, groups
CONVOLUTIONS = [
    ((1, 6, 14, 14), 16, 5, 1, 0, 1),  # LeNet's second convolution: W = 240,000, D = 9
    ((2, 1, 28, 28), 6, 5, 1, 2, 1),
    ((2, 3, 227, 227), 96, 11, 4, 0, 1),  # AlexNet conv1
    ((3, 96, 27, 27), 256, 5, 1, 2, 2),  # AlexNet conv2, two groups
    ((2, 7, 10, 13), 5, (3, 2), (2, 1), (1, 0), 1),
]


@exercise(
    "5.1",
    "work and depth of a convolution layer",
    path="minidl/reference/perf/work_depth.py",
    hint="one multiply-accumulate per output value and kernel tap (C_in/G * K_y * K_x taps), "
    "and a depth that adds the tree depths of the three sums",
)
@forbids(tuned_model_costs, name="minidl's tuned cost model (minidl.perf)")
def check_conv_work_depth():
    for x_shape, c_out, kernel, stride, padding, groups in CONVOLUTIONS:
        conv = L.Conv2d(x_shape[1], c_out, kernel, stride=stride, padding=padding, groups=groups)
        layer = count_model(conv, x_shape[1:], batch=x_shape[0]).layers[0]
        what = (
            f"conv of an {x_shape} input into {c_out} channels, kernel {kernel}, stride {stride}, "
            f"padding {padding}, groups {groups}"
        )
        expect_equal(
            f"(work, depth) of a {what}",
            conv2d_work_depth(x_shape, c_out, kernel, stride, padding, groups),
            (layer.work, layer.depth),
        )


@exercise(
    "5.2",
    "alpha-beta time of ring and recursive-doubling allreduce",
    path="minidl/reference/perf/allreduce_cost.py",
    hint="count the messages on the critical path and the bytes each carries: the ring sends "
    "2(P-1) blocks of m/P bytes, recursive doubling log2(P) whole vectors after folding "
    "the ranks beyond the largest power of two",
)
@forbids(tuned_allreduce_cost, name="minidl's tuned cost model (minidl.perf)")
def check_allreduce_cost():
    rng = np.random.default_rng(52)
    for _ in range(3):
        m = float(rng.integers(1, 1 << 28))
        alpha, beta, gamma = rng.uniform(1e-6, 1e-4), rng.uniform(1e-10, 1e-8), rng.uniform(0, 1e-9)
        params = CostParams(alpha, beta, gamma)
        for p in range(2, 10):
            where = (
                f"m = {m:.0f} bytes, P = {p}, "
                f"alpha = {alpha:.3g}, beta = {beta:.3g}, gamma = {gamma:.3g}"
            )
            expect_close(
                f"ring allreduce time, {where}",
                ring_allreduce_time(m, p, alpha, beta, gamma),
                predict("ring", m, p, params),
                rtol=1e-12,
                atol=0,
            )
            expect_close(
                f"recursive-doubling allreduce time, {where}",
                butterfly_allreduce_time(m, p, alpha, beta, gamma),
                predict("butterfly", m, p, params),
                rtol=1e-12,
                atol=0,
            )


class AffineCompute:
    """T(b) = fixed + per_sample * b, a third of it forward, two thirds backward."""

    def __init__(self, fixed_s, per_sample_s):
        self.fixed_s, self.per_sample_s = fixed_s, per_sample_s

    def step_time(self, b):
        total = self.fixed_s + self.per_sample_s * b
        return StepTime(b, {"layers": (total / 3, 2 * total / 3)})


@exercise(
    "5.3",
    "speedup and efficiency of data-parallel SGD",
    path="minidl/reference/perf/scaling.py",
    hint="add the serial share of T(B), the parallel share of T(b) and the communication, then "
    "subtract the part of the communication hidden behind the parallel backward pass",
)
@forbids(
    tuned_predict,
    tuned_compute_model,
    tuned_network,
    name="minidl's tuned cost model (minidl.perf)",
)
def check_scaling():
    free = Network(0.0, float("inf"))
    for s in (0.0, 0.003, 0.1):  # n divides B: T(B/n) = T(B)/n exactly
        ideal = predict_scaling(
            AffineCompute(0.0, 1e-3), 256, [1, 2, 4, 16, 256], 0, free, serial_fraction=s
        )
        for p in ideal:
            expect_close(
                f"Amdahl speedup on {p.nodes} nodes with serial fraction {s}",
                amdahl_speedup(p.nodes, s),
                p.speedup,
                rtol=1e-12,
                atol=0,
            )
    network = Network(5e-6, 2e9)
    compute = AffineCompute(2e-3, 1e-4)
    t_full = compute.step_time(256).total_s
    # the overlap is capped by the backward pass for 40 MB, by f * T_comm for 1 MB
    for scheme, s, f, nbytes in (
        ("ring", 0.0, 0.0, 40e6),
        ("tree", 0.01, 0.5, 40e6),
        ("butterfly", 0.05, 1.0, 40e6),
        ("ring", 0.02, 0.5, 1e6),
    ):
        for p in predict_scaling(
            compute, 256, [1, 2, 3, 4, 7, 16, 64], nbytes, network, scheme, s, f
        ):
            step = compute.step_time(p.local_batch)
            t = iteration_time(
                t_full,
                step.total_s,
                step.backward_s,
                comm_time(scheme, nbytes, p.nodes, network),
                s,
                f,
            )
            where = (
                f"{p.nodes} nodes, {scheme} allreduce of {nbytes:.0f} bytes, serial fraction {s}, "
                f"overlap {f}"
            )
            expect_close(f"time per iteration, {where}", t, p.iteration_s, rtol=1e-12, atol=0)
            expect_close(f"speedup, {where}", speedup(t_full, t), p.speedup, rtol=1e-12, atol=0)
            expect_close(
                f"efficiency, {where}",
                efficiency(t_full, t, p.nodes),
                p.efficiency,
                rtol=1e-12,
                atol=0,
            )
