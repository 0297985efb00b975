"""The scalability predictor on cases with known answers, and Keuper & Pfreundt's findings.

Oracles: Amdahl's law when communication is free and compute scales
ideally; Ben-Nun & Hoefler's allreduce formulas (Ben-Nun & Hoefler 2019, §2.5)
when only communication costs; the stalling points Keuper & Pfreundt (2016)
report for AlexNet (B = 256, K80, binary tree over FDR InfiniBand).
"""

import math

import pytest

from minidl.perf import count_model
from minidl.perf.compute_model import RooflineCompute, StepTime
from minidl.perf.machine import PRESETS
from minidl.perf.network import NETWORKS, Network
from minidl.perf.predict import efficiency_by_kind, explain, predict_scaling
from minidl.perf.zoo import build_named

FREE = Network(0.0, float("inf"))
POWERS = [2**k for k in range(9)]


class IdealCompute:
    """T(b) = per_sample * b, half forward, half backward: perfect inner scaling."""

    kinds = {"layer": "Linear"}

    def __init__(self, per_sample):
        self.per_sample = per_sample

    def step_time(self, b):
        half = self.per_sample * b / 2
        return StepTime(b, {"layer": (half, half)})


@pytest.mark.parametrize("s", [0.0, 0.001, 0.003, 0.1])
def test_free_communication_and_ideal_compute_give_amdahls_law(s):
    points = predict_scaling(IdealCompute(1e-3), 256, POWERS, 1e9, FREE, "ring", serial_fraction=s)
    for p in points:
        assert p.speedup == pytest.approx(1 / (s + (1 - s) / p.nodes), rel=1e-12)
        assert p.efficiency == pytest.approx(p.speedup / p.nodes, rel=1e-12)


def test_amdahl_numbers_of_keuper_and_pfreundt_figure_12():
    # s = 0.1% (AlexNet) and 0.3% (GoogLeNet): stalling beyond n = 32
    alex = predict_scaling(IdealCompute(1e-3), 1024, [32, 256], 1e9, FREE, serial_fraction=0.001)
    goog = predict_scaling(IdealCompute(1e-3), 1024, [32, 256], 1e9, FREE, serial_fraction=0.003)
    assert [round(p.speedup) for p in alex] == [31, 204]
    assert [round(p.speedup) for p in goog] == [29, 145]


ALPHA, BETA, M = 2e-6, 1 / 5e9, 40e6
SURVEY = {  # §2.5, gamma = 0, P a power of two
    "ring": lambda p: 2 * (p - 1) * (ALPHA + M / p * BETA),
    "tree": lambda p: 2 * math.log2(p) * (ALPHA + M * BETA),
    "butterfly": lambda p: math.log2(p) * (ALPHA + M * BETA),
    "rabenseifner": lambda p: 2 * ALPHA * math.log2(p) + 2 * M * BETA * (p - 1) / p,
    "ps": lambda p: 2 * (p - 1) * (ALPHA + M * BETA),  # Keuper & Pfreundt: 2(n-1)M through one link
}


@pytest.mark.parametrize("scheme", sorted(SURVEY))
def test_pure_communication_is_the_collectives_formula(scheme):
    network = Network(ALPHA, 1 / BETA)
    points = predict_scaling(IdealCompute(0.0), 1024, [1, 2, 4, 8, 64], M, network, scheme)
    assert points[0].iteration_s == 0.0
    for p in points[1:]:
        assert p.iteration_s == pytest.approx(SURVEY[scheme](p.nodes), rel=1e-12)
        assert p.losses["communication"] == p.iteration_s


def test_local_batch_is_rounded_up_and_n_beyond_b_is_impossible():
    points = predict_scaling(IdealCompute(1e-3), 100, [1, 3, 7, 100, 128], 0, FREE)
    assert [p.local_batch for p in points[:4]] == [100, 34, 15, 1]
    assert not points[4].valid and points[3].valid
    lines = explain(points, IdealCompute(1e-3), 100, 0, "ring", 0.0)
    assert any(line.startswith("n <= B: 128 nodes exceed") for line in lines)


def test_overlap_hides_communication_behind_the_backward_pass_only():
    network = Network(0.0, 1e9)  # 1 ms per MB
    compute = IdealCompute(1e-3)  # b = 32 at n = 2: 16 ms of backward
    tree_ms = 2 * 1 * 10  # 10 MB, 2 nodes: one round there and back
    half = predict_scaling(compute, 64, [2], 10e6, network, "tree", overlap=0.5)[0]
    full = predict_scaling(compute, 64, [2], 10e6, network, "tree", overlap=1.0)[0]
    assert half.comm_s == pytest.approx(tree_ms / 2 * 1e-3)
    assert full.comm_s == pytest.approx((tree_ms - 16) * 1e-3)  # only 16 ms of backward to hide in


def test_bad_fractions_are_rejected():
    with pytest.raises(ValueError, match="serial fraction"):
        predict_scaling(IdealCompute(1e-3), 64, [1], 0, FREE, serial_fraction=1.0)


# ------------------------------------------------------------------ Keuper & Pfreundt's AlexNet
@pytest.fixture(scope="module")
def alexnet_on_k80():
    """AlexNet counts on a K80 roofline, scaled to their Table I: 0.9 s per iteration at B = 256."""
    model, shape = build_named("alexnet-original")
    costs = count_model(model, shape, 1)
    return RooflineCompute(costs, PRESETS["k80"]).calibrated(256, 0.9), 4 * costs.num_parameters


def test_alexnet_is_communication_bound_beyond_a_few_nodes(alexnet_on_k80):
    compute, nbytes = alexnet_on_k80
    points = predict_scaling(compute, 256, POWERS, nbytes, NETWORKS["fdr-infiniband"], "tree")
    bound = [p.nodes for p in points if p.nodes > 1 and p.comm_s >= p.compute_s]
    assert bound[0] == 8  # "communication bound after only 4 to 8 nodes"
    best = max(points, key=lambda p: p.speedup)
    assert best.nodes <= 8 and best.speedup < 3
    assert all(p.main_loss == "communication" for p in points[1:])


def test_fully_connected_layers_lose_efficiency_at_small_local_batches(alexnet_on_k80):
    compute, _ = alexnet_on_k80
    at_64, at_8 = efficiency_by_kind(compute, 256, 64), efficiency_by_kind(compute, 256, 8)
    assert at_8["Linear"] < 0.5 < at_64["Linear"]  # stalls for b <= 32 ("degenerated" GEMMs)
    assert at_8["Conv2d"] > 0.9  # convolutions keep scaling
    free = predict_scaling(compute, 256, POWERS, 0, FREE)
    assert free[-1].speedup < 0.25 * 256  # even free communication: far from linear
    assert free[-1].main_loss == "small local batch"
