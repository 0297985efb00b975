"""The profiler attributes time and memory to the right layers.

Oracle: layers that sleep for known durations in forward and in backward,
so the expected times are known independently of the machine's speed.
"""

import time

import numpy as np
import pytest

from minidl import layers as L
from minidl.autograd import Function
from minidl.perf.profile import format_profile, profile_model

FORWARD_S, BACKWARD_S = 0.06, 0.09
SLACK = 0.03  # a loaded machine oversleeps; still half the smallest sleep


class Sleep(Function):
    def forward(self, x):
        time.sleep(FORWARD_S)
        return x.copy()

    def backward(self, g):
        time.sleep(BACKWARD_S)
        return g


class Sleeper(L.Module):
    """Identity that sleeps FORWARD_S in forward and BACKWARD_S in backward."""

    def forward(self, x):
        return Sleep.apply(x)


class SleepyLinear(L.Linear):
    """A first layer whose backward (weight gradient only) sleeps BACKWARD_S."""

    def forward(self, x):
        return Sleep.apply(super().forward(x))


def rows(profile):
    return {layer.name: layer for layer in profile.layers}


def test_forward_and_backward_time_go_to_the_layer_that_spends_it():
    model = L.Sequential(L.Linear(8, 16), Sleeper(), L.ReLU(), L.Linear(16, 4))
    profile = profile_model(model, (8,), batch=4, steps=3, warmup=1, memory=False)
    by_name = rows(profile)
    slow = by_name["1"]
    assert FORWARD_S <= slow.forward_s < FORWARD_S + SLACK
    assert BACKWARD_S <= slow.backward_s < BACKWARD_S + SLACK
    for name in ("0", "2", "3"):  # neighbours do not inherit the sleeps
        assert by_name[name].total_s < SLACK
    # disjoint pieces of one step; a sum of medians may exceed the median of the sums by the
    # steps' spread, here far below 1% of a step that sleeps 150 ms
    assert profile.rows_s() <= 1.01 * profile.profiled_step_s
    assert 2 * (FORWARD_S + BACKWARD_S) > profile.step_s >= FORWARD_S + BACKWARD_S


def test_first_layer_backward_ends_when_its_weight_gradient_is_done():
    model = L.Sequential(SleepyLinear(8, 16), L.ReLU(), L.Linear(16, 4))
    profile = profile_model(model, (8,), batch=4, steps=3, warmup=1, memory=False)
    first = rows(profile)["0"]
    assert BACKWARD_S <= first.backward_s < BACKWARD_S + SLACK
    assert rows(profile)["2"].backward_s < SLACK


def test_memory_of_each_layer_covers_its_output():
    model = L.Sequential(L.Linear(64, 256), L.ReLU(), L.Linear(256, 10))
    profile = profile_model(model, (64,), batch=32, steps=1, warmup=1)
    by_name = rows(profile)
    assert by_name["0"].output_bytes == 32 * 256 * 4
    assert by_name["0"].retained_bytes >= 32 * 256 * 4  # the output stays for the next layer
    assert by_name["0"].peak_bytes >= by_name["0"].retained_bytes
    assert by_name["2"].output_bytes == 32 * 10 * 4


def test_report_is_sorted_by_time_with_shares():
    model = L.Sequential(L.Linear(8, 16), Sleeper(), L.Linear(16, 4))
    text = format_profile(profile_model(model, (8,), batch=2, steps=1, warmup=1, memory=False))
    lines = text.splitlines()
    assert lines[3].startswith("1 ") and "Sleeper" in lines[3]  # the slowest layer first
    share = float(lines[3].split()[5].rstrip("%"))
    assert 50 < share <= 100
    assert "the rows cover" in lines[-1]
    assert np.isfinite(float(lines[-1].split("cover ")[1].split("%")[0]))


def test_rows_by_layer_type_add_up_the_layers():
    model = L.Sequential(L.Linear(8, 16), Sleeper(), L.ReLU(), L.Linear(16, 4), Sleeper())
    profile = profile_model(model, (8,), batch=4, steps=1, warmup=1, memory=False)
    types = {row.name: row for row in profile.by_type()}
    assert set(types) == {"Linear", "Sleeper", "ReLU"} and types["Sleeper"].kind == "2 layers"
    for kind, row in types.items():
        members = [layer for layer in profile.layers if layer.kind == kind]
        assert row.total_s == pytest.approx(sum(layer.total_s for layer in members))
    assert types["Sleeper"].total_s >= 2 * (FORWARD_S + BACKWARD_S)
    assert format_profile(profile, by_type=True).splitlines()[3].startswith("Sleeper")
