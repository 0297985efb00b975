"""The stage cut by memory (``minidl.dist.pipeline.cut``): what each stage holds in flight
under a schedule, and the cut whose largest stage holds the fewest bytes."""

import itertools

import pytest

import minidl as md
from minidl.dist.pipeline import build, memory_partition, partition
from minidl.dist.pipeline.cut import in_flight, min_max_bounds


@pytest.mark.parametrize("ranks, micro_batches", [(2, 4), (4, 2), (4, 8), (3, 3)])
def test_in_flight_is_1f1b_s_minus_k_bounded_by_m_and_gpipe_m(ranks, micro_batches):
    """1F1B keeps min(M, P - k) micro-batches on stage k (its warm-up forwards plus one);
    GPipe keeps all M; naive one."""
    one_f_one_b = in_flight(build("1f1b", ranks, micro_batches), 1)
    assert one_f_one_b == [min(micro_batches, ranks - k) for k in range(ranks)]
    assert in_flight(build("gpipe", ranks, micro_batches), 1) == [micro_batches] * ranks
    assert in_flight(build("naive", ranks, micro_batches), 1) == [1] * ranks


def test_the_dynamic_programme_finds_the_best_cut_with_stage_dependent_costs():
    """Against every contiguous cut, for costs that depend on the stage (as in-flight
    activations do): the programme's largest stage is the smallest there is."""
    weights = [5, 1, 8, 2, 2, 9, 1, 3]
    factor = [3, 2, 1]

    def cost(k, i, j):
        return sum(weights[i:j]) * factor[k] + (k + 1)

    bounds = min_max_bounds(weights, 3, cost)
    got = max(cost(k, a, b) for k, (a, b) in enumerate(bounds))
    best = min(
        max(cost(k, a, b) for k, (a, b) in enumerate(zip((0, *cuts), (*cuts, len(weights)))))
        for cuts in itertools.combinations(range(1, len(weights)), 2)
    )
    assert got == best


@pytest.mark.parametrize("variant, side", [("original", 227), ("torchvision", 224)])
def test_alexnet_cut_by_memory_holds_less_than_by_layers(variant, side):
    """Counting layers puts AlexNet's fully connected layers (97% of its weights) on the last
    of two stages; the memory cut's largest stage holds less than that cut's largest,
    measured by the same formula, and it is the smallest over every cut point."""
    model = md.models.build("alexnet", num_classes=1000, in_channels=3, variant=variant)
    options = dict(micro_batches=4, schedule="1f1b", optimizer="momentum")
    cut = memory_partition(model, 2, (3, side, side), 16, **options)
    assert cut.by == "memory" and len(cut) == 2
    by_layers = partition(model, 2).bounds
    every = []
    for point in range(1, len(model)):
        fixed = memory_partition(model, 2, (3, side, side), 16, **options, cuts=[point])
        every.append(max(fixed.costs))
        if (fixed.bounds) == by_layers:
            layers_cost = max(fixed.costs)
    assert max(cut.costs) == min(every)
    assert max(cut.costs) < layers_cost
