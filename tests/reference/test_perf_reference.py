"""The reference performance models against minidl.perf and closed forms.

* work and depth: layer by layer on LeNet-5 and both ImageNet AlexNets,
  against ``count_model`` (its consistent "corrected" convention);
* allreduce: every algorithm for P = 1..9 against ``allreduce_cost.predict``, Ben-Nun &
  Hoefler's formulas for powers of two (2019, §2.5), and
  the lower bound;
* scaling: Keuper & Pfreundt's model against ``predict_scaling`` on a
  calibrated AlexNet and on LeNet, and Amdahl's law.
"""

import math

import numpy as np
import pytest

from minidl import layers as L
from minidl import models
from minidl.perf import count_model
from minidl.perf.allreduce_cost import MODELLED_ALGORITHMS, CostParams, predict
from minidl.perf.compute_model import RooflineCompute
from minidl.perf.machine import PRESETS
from minidl.perf.network import NETWORKS
from minidl.perf.predict import predict_scaling
from minidl.perf.zoo import build_named
from minidl.reference.perf import allreduce_cost, scaling
from minidl.reference.perf import work_depth as wd


def reference_cost(module, x_shape):
    """(W, D) of one layer from the reference formulas; None for layer types they leave out."""
    kind = type(module).__name__
    if kind == "Conv2d":
        assert module.dilation == (1, 1)
        return wd.conv2d_work_depth(
            x_shape,
            module.out_channels,
            module.kernel_size,
            module.stride,
            module.padding,
            module.groups,
        )
    if kind == "Linear":
        return wd.linear_work_depth(x_shape, module.out_features)
    if kind in ("MaxPool2d", "AvgPool2d"):
        return wd.pool2d_work_depth(
            x_shape,
            module.kernel_size,
            module.stride,
            module.padding,
            "max" if kind == "MaxPool2d" else "avg",
        )
    if kind in ("ReLU", "Tanh", "Sigmoid"):
        return wd.activation_work_depth(x_shape)
    return None


def compare_layers(model, input_shape, batch):
    """Assert reference (W, D) == count_model's for every layer the reference covers.

    Returns the layer types compared, the reference (W, D) of the whole chain
    and count_model's totals.
    """
    modules = dict(model.named_modules())
    costs = count_model(model, input_shape, batch)
    kinds, ours = set(), []
    for layer in costs.layers:
        cost = reference_cost(modules[layer.name], layer.input_shape)
        if cost is not None:
            assert cost == (layer.work, layer.depth), (layer.name, layer.kind, layer.input_shape)
            kinds.add(layer.kind)
            ours.append(cost)
    return kinds, wd.chain_work_depth(ours), (costs.total("work"), costs.total("depth"))


@pytest.fixture(scope="module")
def alexnet_original():
    return build_named("alexnet-original")


@pytest.mark.parametrize("activation, kind", [("relu", "ReLU"), ("tanh", "Tanh")])
def test_work_and_depth_of_lenet_layers(activation, kind):
    kinds, chain, totals = compare_layers(
        models.lenet5(activation=activation), (1, 28, 28), batch=3
    )
    assert kinds == {"Conv2d", "MaxPool2d", "Linear", kind}
    assert chain == totals  # every layer with arithmetic is covered; Flatten costs nothing


def test_work_and_depth_of_alexnet_layers(alexnet_original):
    # 227x227 inputs, stride-4 and grouped convolutions, overlapping 3x3/2 pooling
    kinds, (work, _), (all_work, _) = compare_layers(*alexnet_original, batch=2)
    assert kinds == {"Conv2d", "MaxPool2d", "Linear", "ReLU"}
    assert 0 < all_work - work < 0.05 * all_work  # LRN and dropout are left to minidl.perf


def test_average_pooling_uneven_windows_and_sigmoid():
    model = L.Sequential(
        L.Conv2d(3, 4, (3, 5), stride=(2, 1), padding=(1, 2)),
        L.Sigmoid(),
        L.AvgPool2d(3, stride=2, padding=1),
        L.MaxPool2d((2, 3)),
    )
    kinds, chain, totals = compare_layers(model, (3, 17, 12), batch=2)
    assert kinds == {"Conv2d", "Sigmoid", "AvgPool2d", "MaxPool2d"} and chain == totals


def test_the_surveys_lenet_numbers_that_follow_table_6():
    # Ben-Nun & Hoefler §3.3.1: pooling depth 2, fully connected 48,000 / 10,080 / 840 with
    # depths 9, 7, 7, and conv2 of depth 9; conv2 at its 10x10 output is 240,000 (the paper's
    # 470,400 takes the 14x14 input), conv1 has depth 6 by Table 6 (the paper writes 5)
    assert wd.conv2d_work_depth((1, 6, 14, 14), 16, 5) == (240_000, 9)
    assert wd.conv2d_work_depth((1, 1, 32, 32), 6, 5) == (117_600, 6)
    assert wd.pool2d_work_depth((1, 6, 28, 28), 2)[1] == 2
    assert [wd.linear_work_depth((1, i), o) for i, o in ((400, 120), (120, 84), (84, 10))] == [
        (48_000, 9),
        (10_080, 7),
        (840, 7),
    ]
    assert wd.tree_depth(1) == 0 and wd.tree_depth(25) == 5 and wd.tree_depth(32) == 5


# ------------------------------------------------------------------ allreduce
@pytest.mark.parametrize("algorithm", MODELLED_ALGORITHMS)
def test_allreduce_time_is_the_cost_models(algorithm):
    rng = np.random.default_rng(7)
    for _ in range(4):
        m = float(rng.integers(1, 1 << 30))
        params = CostParams(rng.uniform(1e-7, 1e-4), rng.uniform(1e-11, 1e-8), rng.uniform(0, 1e-9))
        for p in range(1, 10):
            assert allreduce_cost.ALLREDUCE_TIME[algorithm](m, p, *params) == pytest.approx(
                predict(algorithm, m, p, params), rel=1e-12, abs=0
            ), f"P = {p}"


ALPHA, BETA, M = 3e-6, 1 / 6e9, 24e6
SURVEY = {  # §2.5 with L = alpha, G = beta, gamma m = M bytes
    "tree": lambda p: 2 * math.log2(p) * (ALPHA + M * BETA),
    "butterfly": lambda p: math.log2(p) * (ALPHA + M * BETA),
    "ring": lambda p: 2 * (p - 1) * (ALPHA + M / p * BETA),
    "rabenseifner": lambda p: 2 * ALPHA * math.log2(p) + 2 * M * BETA * (p - 1) / p,
}


@pytest.mark.parametrize("algorithm", sorted(SURVEY))
def test_allreduce_time_is_the_surveys_formula_for_powers_of_two(algorithm):
    for p in (2, 4, 8, 64):
        assert allreduce_cost.ALLREDUCE_TIME[algorithm](M, p, ALPHA, BETA) == pytest.approx(
            SURVEY[algorithm](p), rel=1e-12
        )


def test_no_algorithm_beats_the_lower_bound_and_rabenseifner_is_one_latency_term_above_it():
    for p in range(2, 33):
        bound = allreduce_cost.allreduce_lower_bound(M, p, ALPHA, BETA)
        for algorithm, time in allreduce_cost.ALLREDUCE_TIME.items():
            assert time(M, p, ALPHA, BETA, 1e-10) >= bound * (1 - 1e-12), (algorithm, p)
        if p & (p - 1) == 0:  # the bandwidth term is optimal, the latency term twice the bound's
            assert allreduce_cost.rabenseifner_allreduce_time(M, p, ALPHA, BETA) == pytest.approx(
                bound + ALPHA * math.log2(p), rel=1e-12
            )


# ------------------------------------------------------------------ scaling
def reference_scaling(compute, global_batch, nodes, nbytes, network, scheme, s, f):
    """(T(n), S(n), E(n)) per node count from the reference formulas and allreduce costs."""
    t_full = compute.step_time(global_batch).total_s
    out = []
    for n in nodes:
        step = compute.step_time(scaling.local_batch(global_batch, n))
        t_comm = allreduce_cost.ALLREDUCE_TIME[scheme](
            nbytes, n, network.latency_s, 1 / network.bandwidth
        )
        t = scaling.iteration_time(t_full, step.total_s, step.backward_s, t_comm, s, f)
        out.append((t, scaling.speedup(t_full, t), scaling.efficiency(t_full, t, n)))
    return out


NODES = [1, 2, 3, 4, 6, 8, 16, 32, 100, 256]


def assert_same_predictions(compute, global_batch, nbytes, network, scheme, s, f):
    points = predict_scaling(compute, global_batch, NODES, nbytes, network, scheme, s, f)
    ours = reference_scaling(compute, global_batch, NODES, nbytes, network, scheme, s, f)
    for p, (t, speedup, efficiency) in zip(points, ours):
        assert (t, speedup, efficiency) == pytest.approx(
            (p.iteration_s, p.speedup, p.efficiency), rel=1e-12
        ), f"n = {p.nodes}"
    return points


def test_scaling_of_alexnet_on_k80s_is_the_predictors(alexnet_original):
    model, shape = alexnet_original
    costs = count_model(model, shape, 1)
    compute = RooflineCompute(costs, PRESETS["k80"]).calibrated(256, 0.9)  # their Table I
    for scheme, s, f in (("tree", 0.0, 0.0), ("ring", 0.001, 0.5)):
        assert_same_predictions(
            compute, 256, 4 * costs.num_parameters, NETWORKS["fdr-infiniband"], scheme, s, f
        )


def test_scaling_of_lenet_with_overlap_and_a_serial_fraction_is_the_predictors():
    model = models.lenet5()
    costs = count_model(model, (1, 28, 28), 1)
    compute = RooflineCompute(costs, PRESETS["haswell-2x12"])
    for scheme in ("butterfly", "rabenseifner"):
        assert_same_predictions(
            compute, 256, 4 * costs.num_parameters, NETWORKS["10gbe"], scheme, 0.003, 1.0
        )


@pytest.mark.parametrize("s", [0.0, 0.001, 0.003, 0.1])
def test_amdahl_is_the_limit_of_free_communication_and_ideal_compute(s):
    for n in (1, 2, 8, 32, 1024):
        t_full, t_local = 1.0, 1.0 / n  # T(b) proportional to b
        t = scaling.iteration_time(t_full, t_local, t_local / 2, 0.0, s)
        assert scaling.speedup(t_full, t) == pytest.approx(scaling.amdahl_speedup(n, s), rel=1e-12)
    # Keuper & Pfreundt, Fig. 12: s = 0.1% (AlexNet) and 0.3% (GoogLeNet) at 32 and 256 nodes
    assert [round(scaling.amdahl_speedup(n, 0.001)) for n in (32, 256)] == [31, 204]
    assert [round(scaling.amdahl_speedup(n, 0.003)) for n in (32, 256)] == [29, 145]


def test_overlap_hides_at_most_the_parallel_backward_pass():
    assert scaling.iteration_time(1.0, 0.5, 0.2, 0.3, overlap=0.5) == pytest.approx(
        0.5 + 0.3 - 0.15
    )
    assert scaling.iteration_time(1.0, 0.5, 0.2, 0.3, overlap=1.0) == pytest.approx(0.5 + 0.3 - 0.2)


def test_local_batch_rounds_up_and_refuses_more_nodes_than_samples():
    assert [scaling.local_batch(100, n) for n in (1, 3, 7, 100)] == [100, 34, 15, 1]
    with pytest.raises(ValueError, match="101 nodes cannot share a global batch of 100"):
        scaling.local_batch(100, 101)
