"""Compute models: the roofline formula, interpolation of measurements, and accuracy here.

The accuracy test compares the measured compute model's prediction with
plain (uninstrumented) training steps timed in the same process,
interleaved with the measurements, on one BLAS thread so that other
processes on the machine slow both sides alike; medians, and up to three
attempts so that a burst of load elsewhere does not fail it.
"""

import numpy as np
import pytest
import threadpoolctl

from minidl import layers as L
from minidl import models
from minidl.perf import count_model
from minidl.perf.compute_model import MeasuredCompute, RooflineCompute, measure_compute
from minidl.perf.machine import Machine
from minidl.perf.profile import LayerProfile, Profile, TrainingStep

MACHINE = Machine("test", peak_flops=1e12, bandwidth=1e11, overhead_s=1e-6)


def test_roofline_times_follow_the_formula():
    costs = count_model(L.Sequential(L.Linear(4096, 4096)), (4096,), batch=1)
    roof = RooflineCompute(costs, MACHINE)
    weights = (4096 * 4096 + 4096) * 4
    for b in (1, 8, 1024):
        acts = b * (4096 + 4096) * 4
        flops = b * (2 * 4096 * 4096 + 4096)
        forward, backward = roof.step_time(b).layers["0"]
        assert forward == pytest.approx(max(flops / 1e12, (weights + acts) / 1e11) + 1e-6)
        grad_flops = b * (2 * 4096 * 4096 + 4096)  # weight gradient only: first layer
        assert backward == pytest.approx(max(grad_flops / 1e12, (weights + acts) / 1e11) + 1e-6)
    t1, t8 = (sum(roof.step_time(b).layers["0"]) for b in (1, 8))
    assert t8 == pytest.approx(t1, rel=0.05)  # memory-bound: 8x the samples, same time


def test_calibration_scales_every_time_alike():
    costs = count_model(models.mlp(), (1, 28, 28), batch=1)
    roof = RooflineCompute(costs, MACHINE)
    calibrated = roof.calibrated(64, 0.5)
    assert calibrated.step_time(64).total_s == pytest.approx(0.5)
    ratio = calibrated.step_time(8).total_s / roof.step_time(8).total_s
    assert ratio == pytest.approx(0.5 / roof.step_time(64).total_s)


def fake_profile(batch, per_sample, fixed):
    layer = LayerProfile("0", "Linear", forward_s=fixed + per_sample * batch, backward_s=fixed)
    return Profile(batch, [layer], loss_s=0.0, update_s=fixed, step_s=1.0, profiled_step_s=1.0)


def test_measurements_are_interpolated_linearly_and_extrapolated_along_the_end_segments():
    compute = MeasuredCompute({b: fake_profile(b, 1e-3, 2e-3) for b in (64, 16, 32)})
    for b in (4, 16, 24, 48, 64, 256):
        assert compute.step_time(b).total_s == pytest.approx(3 * 2e-3 + 1e-3 * b)
    superlinear = MeasuredCompute({b: fake_profile(b, 1e-3, 0.0) for b in (16, 32)})
    superlinear.profiles[16].layers[0].forward_s = 0.005  # 16 -> 32 costs more than 2x
    assert superlinear.step_time(4).total_s == pytest.approx(0.005 * 4 / 16)  # never below ideal


def test_measured_compute_predicts_lenet_iteration_times_within_20_percent():
    with threadpoolctl.threadpool_limits(1):
        model = models.lenet5(conv_algo="im2col")
        plain = {b: TrainingStep(model, (1, 28, 28), b) for b in (48, 64)}  # 48 interpolated
        for step in plain.values():
            step.run()
        for _attempt in range(3):
            predicted, measured = {b: [] for b in plain}, {b: [] for b in plain}
            for _ in range(7):  # interleaved, so that both sides see the same load
                compute = measure_compute(model, (1, 28, 28), [32, 64], steps=1, warmup=1)
                for b, step in plain.items():
                    predicted[b].append(compute.step_time(b).total_s)
                    measured[b].append(step.run())
            errors = {b: np.median(predicted[b]) / np.median(measured[b]) - 1 for b in plain}
            if all(abs(e) < 0.2 for e in errors.values()):
                return
    pytest.fail(f"predicted/measured - 1 = {errors} after 3 attempts (limit 20%)")
