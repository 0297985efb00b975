"""Parameter-server pieces that need no MPI: modes, layout, messages, SSP clocks, delays,
telemetry."""

import numpy as np
import pytest

from minidl.dist.consistency.averaging import ElasticRule, elastic_difference
from minidl.dist.consistency.ps import HEADER_BYTES, Layout, Message
from minidl.dist.consistency.ssp import ClockedGradients, ClockTable
from minidl.dist.straggler import Straggler
from minidl.perf.telemetry import StalenessHistogram, format_table, summarize_epoch
from minidl_app.cli.train import parse_dist_mode, parse_straggler


def test_modes_parse_and_bad_ones_name_the_choices():
    assert parse_dist_mode("bsp").staleness == 0 and parse_dist_mode("bsp").uses_server
    assert parse_dist_mode("ssp:3").staleness == 3
    assert parse_dist_mode("asp").staleness is None
    assert parse_dist_mode("avg:4").period == 4 and not parse_dist_mode("avg:4").uses_server
    easgd = parse_dist_mode("easgd:0.3:8")
    assert (easgd.alpha, easgd.period) == (0.3, 8) and parse_dist_mode("easgd").alpha is None
    assert not parse_dist_mode("sync").uses_server
    for bad, hint in (
        ("ssp", "unknown --dist"),
        ("ssp:-1", "must be >= 0"),
        ("ssp:x", "S must be a number"),
        ("avg:0", "H must be >= 1"),
        ("easgd:1.5", "ALPHA must be in"),
        ("hogwild", "ssp:S, asp"),
    ):
        with pytest.raises(ValueError, match=hint):
            parse_dist_mode(bad)


def test_layout_shards_cover_every_parameter_once():
    layout = Layout(size=5, servers=3, nparams=61706)
    assert layout.workers == 2 and [layout.is_server(r) for r in range(5)] == [1, 1, 1, 0, 0]
    assert layout.worker_index(4) == 1 and layout.worker_rank(1) == 4
    covered = np.concatenate([np.arange(61706)[layout.shard(k)] for k in range(3)])
    assert np.array_equal(covered, np.arange(61706))
    assert (
        max(layout.shard_size(k) for k in range(3)) - min(layout.shard_size(k) for k in range(3))
        <= 1
    )
    with pytest.raises(ValueError, match="needs at least 3 ranks"):
        Layout(size=2, servers=2, nparams=10, mode="asp")
    with pytest.raises(ValueError, match="is a server"):
        layout.worker_index(0)


def test_messages_carry_header_and_payload():
    message = Message(100)
    payload = np.arange(5, dtype=np.float32)
    data = message.fill([0, 7, 3, -1], payload)
    assert data.nbytes == HEADER_BYTES + 20
    assert message.fields() == [0, 7, 3, -1, 20]
    assert np.array_equal(message.body().view(np.float32), payload)
    assert message.fill([1, 0, 0, 0]).nbytes == HEADER_BYTES and message.body().nbytes == 0


def test_ssp_gate_lets_a_worker_run_at_most_s_clocks_ahead():
    clocks = ClockTable(workers=3, staleness=2)
    for _ in range(2):
        clocks.tick(0)
    assert clocks.may_start(2)  # clock 2 - min 0 = 2 <= S
    clocks.tick(0)
    assert not clocks.may_start(3)  # 3 ahead of the slowest: wait
    clocks.tick(1), clocks.tick(2)
    assert clocks.may_start(3) and clocks.min_clock == 1
    assert ClockTable(2, None).may_start(10**6)  # asp never waits
    bsp = ClockTable(2, 0)
    bsp.tick(0)
    assert not bsp.may_start(1) and bsp.may_start(0)
    with pytest.raises(ValueError, match="integer >= 0"):
        ClockTable(2, -1)


def test_a_clock_is_applied_once_complete_as_the_mean_in_worker_order():
    clocked = ClockedGradients(workers=2)
    g = [np.array([1.0, 2.0], np.float32), np.array([3.0, 6.0], np.float32)]
    clocked.add(1, 0, 0, g[1])
    assert list(clocked.pop_complete()) == []
    clocked.add(1, 1, 0, g[1])  # worker 1 runs ahead: clock 1 waits for clock 0
    assert list(clocked.pop_complete()) == [] and clocked.incomplete() == [0, 1]
    clocked.add(0, 0, 0, g[0])
    ((mean, reads),) = clocked.pop_complete()
    assert np.array_equal(mean, [2.0, 4.0]) and reads == [(0, 0), (1, 0)]
    assert clocked.incomplete() == [1]
    with pytest.raises(RuntimeError, match="pushed clock 1 twice"):
        clocked.add(1, 1, 0, g[1])


def test_elastic_exchange_is_symmetric():
    """d = alpha (x - c); x - d and c + d: x + c is unchanged, both move towards each other."""
    rng = np.random.default_rng(0)
    center = rng.standard_normal(50).astype(np.float32)
    rule = ElasticRule(center.copy(), alpha=0.25)
    local = rng.standard_normal(50).astype(np.float32)
    d, applied = rule.push(0, 0, 0, local.view(np.uint8))
    assert np.allclose(d, elastic_difference(local, center, 0.25))
    assert np.allclose((local - d) + rule.center, local + center, atol=1e-6)
    assert np.linalg.norm((local - d) - rule.center) < np.linalg.norm(local - center)
    assert applied == [(0, 0)] and rule.version == 1


def test_straggler_sleeps_factor_minus_one_times_compute_plus_seeded_jitter():
    slept = []
    slow = Straggler(rank=1, stragglers={1: 3.0}, sleep=slept.append)
    assert slow.pause(0.02) == pytest.approx(0.04) and slept == [pytest.approx(0.04)]
    assert not Straggler(rank=0, stragglers={1: 3.0}).active
    a = Straggler(rank=2, jitter=0.01, seed=5, sleep=lambda s: None)
    b = Straggler(rank=2, jitter=0.01, seed=5, sleep=lambda s: None)
    draws = [a.pause(0.0) for _ in range(2000)]
    assert draws[:10] == [b.pause(0.0) for _ in range(10)]  # reproducible
    assert np.mean(draws) == pytest.approx(0.01, rel=0.1)  # exponential, mean 10 ms
    assert draws[:10] != [
        Straggler(rank=3, jitter=0.01, seed=5, sleep=lambda s: None).pause(0.0) for _ in range(10)
    ]  # other ranks draw other delays
    for bad in ("1", "x:2", "1:0.5", "-1:2"):
        with pytest.raises(ValueError, match="RANK"):
            parse_straggler(bad)


def test_staleness_histogram_and_epoch_summary():
    histogram = StalenessHistogram()
    for s in (0, 0, 1, 2, 2, 2):
        histogram.add(s)
    assert histogram.to_dict() == {
        "histogram": {"0": 2, "1": 1, "2": 3},
        "count": 6,
        "mean": 7 / 6,
        "max": 2,
    }
    with pytest.raises(ValueError, match="negative staleness"):
        histogram.add(-1)
    records = [
        {
            "role": "server",
            "rank": 0,
            "staleness": {"0": 3, "1": 1},
            "updates": 4,
            "applied": 4,
            "version": 4,
            "gate_wait_s": [0.5, 0.0],
            "bytes_sent": 100,
            "bytes_received": 200,
        },
        {
            "role": "worker",
            "rank": 2,
            "seconds": 2.0,
            "gradients": 1,
            "bytes_sent": 120,
            "wait_s": 0.1,
        },
        {
            "role": "worker",
            "rank": 1,
            "seconds": 1.0,
            "gradients": 3,
            "bytes_sent": 80,
            "wait_s": 0.6,
        },
    ]
    summary = summarize_epoch("ssp:1", records, images=256)
    assert summary["seconds"] == 2.0 and summary["images_per_s"] == 128
    assert summary["gradients"] == 4 and summary["updates_per_s"] == 2.0
    assert summary["staleness"]["mean"] == 0.25 and summary["staleness"]["max"] == 1
    assert summary["per_worker"]["wait_s"] == [0.6, 0.1]  # in rank order
    assert summary["bytes_sent"] == 300 and summary["bytes_per_gradient"] == 50
    table = format_table([{"a": 1.5, "b": None}], [("A", "a", "{:.1f}"), ("B", "b", "{}")])
    assert table.splitlines() == ["  A  B", "---  -", "1.5  -"]
