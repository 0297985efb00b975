"""The per-level cost model: the hierarchical allreduce's time, term by term."""

import numpy as np
import pytest

from minidl.perf.allreduce_cost import PINGPONG_SIZES, CostParams, fit_alpha_beta, predict
from minidl.perf.level_cost import (
    fit_link,
    load_levels,
    predict_across_nodes,
    predict_hierarchical,
    save_levels,
)
from minidl_app.cli import main

INTRA = CostParams(alpha=2e-6, beta=1e-10, gamma=3e-11)  # shared memory: ~80 Gbit/s
INTER = CostParams(alpha=50e-6, beta=8e-9, gamma=3e-11)  # a 1 Gbit/s link


def test_a_link_fit_sees_through_what_the_link_lets_through_at_once():
    """Ping-pong times of a 1 Gbit/s link whose token bucket passes 125 KB at once: the
    link fit finds its latency and rate, where a least-squares fit counts the fast short
    messages as bandwidth."""
    sizes = np.array(PINGPONG_SIZES, dtype=float)
    times = INTER.alpha + INTER.beta * np.maximum(sizes - 125e3, 0)
    alpha, beta = fit_link(list(sizes), list(times))
    assert alpha == pytest.approx(INTER.alpha) and beta == pytest.approx(INTER.beta)
    assert fit_alpha_beta(sizes, times)[1] < 0.8 * INTER.beta  # what the link fit is for
    assert fit_link([1e3, 1e6, 1e7], [1e-5, 1e-3, 0.9e-3])[1] == 0.0  # noise: never negative
    with pytest.raises(ValueError, match="3 sizes or more"):
        fit_link([1e3, 1e6], [1e-5, 1e-3])


@pytest.mark.parametrize("nodes, ranks_per_node", [(2, 4), (4, 2), (3, 3), (4, 1)])
def test_hierarchical_time_is_reduce_plus_leaders_ring_plus_broadcast(nodes, ranks_per_node):
    m = 16e6
    rounds = {1: 0, 2: 1, 3: 2, 4: 2}[ranks_per_node]  # binomial rounds: ceil(log2 q)
    reduce = rounds * (INTRA.alpha + m * INTRA.beta + m * INTRA.gamma)
    broadcast = rounds * (INTRA.alpha + m * INTRA.beta)
    n = nodes  # the leaders' ring: 2 (N-1) messages of m/N, (N-1) m/N added
    ring = 2 * (n - 1) * (INTER.alpha + m / n * INTER.beta) + (n - 1) * m / n * INTER.gamma
    expected = reduce + ring + broadcast
    levels = {"intra": INTRA, "inter": INTER}
    got = predict_across_nodes("hierarchical", m, nodes, ranks_per_node, levels)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == predict_hierarchical(m, nodes, ranks_per_node, INTRA, INTER)


def test_flat_algorithms_across_nodes_pay_the_network_at_every_step():
    levels = {"intra": INTRA, "inter": INTER}
    for algorithm in ("ring", "butterfly", "tree", "rabenseifner"):
        got = predict_across_nodes(algorithm, 1e6, 2, 4, levels)
        assert got == predict(algorithm, 1e6, 8, INTER)
    # each of the flat ring's 2 (P-1) steps waits for a network message of m/P; the leaders'
    # ring takes 2 (N-1) steps of m/N: fewer latencies, 2 (N-1)/N m instead of 2 (P-1)/P m
    for m in (1e3, 1e6, 64e6):
        flat = predict_across_nodes("ring", m, 4, 4, levels)
        assert predict_across_nodes("hierarchical", m, 4, 4, levels) < flat


def test_one_node_keeps_every_message_inside_it():
    levels = {"intra": INTRA, "inter": INTER}
    m, q = 1e6, 4  # the ring on one node: 2 (q-1) intra messages of m/q, (q-1) m/q added
    ring = 2 * (q - 1) * (INTRA.alpha + m / q * INTRA.beta) + (q - 1) * m / q * INTRA.gamma
    assert predict_across_nodes("ring", m, 1, q, levels) == pytest.approx(ring, rel=1e-12)


def test_saved_levels_load_back_and_a_bad_file_names_the_fix(tmp_path):
    path = tmp_path / "levels.json"
    save_levels(path, {"intra": INTRA, "inter": INTER})
    assert load_levels(path) == {"intra": INTRA, "inter": INTER}
    save_levels(path, {"intra": None, "inter": INTER})  # one rank per node: no intra level
    with pytest.raises(ValueError, match="no 'intra' level.*save_levels"):
        load_levels(path)


def predicted_table(capsys, *argv):
    """{(nodes, algorithm): ms} from ``minidl predict --ppn``'s table."""
    assert main(["predict", "--model", "lenet5", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[1].split()
    assert head[:2] == ["nodes", "ranks"] and head[-1] == "fastest"
    table = {}
    for line in lines[3:]:
        cells = line.split()
        for name, cell in zip(head[2:-1], cells[2:-1]):
            table[int(cells[0]), name] = float(cell)
        table[int(cells[0]), "fastest"] = cells[-1]
    return table


LENET_BYTES = 61706 * 4


def test_predict_cli_prints_each_algorithm_from_named_networks(capsys):
    """10 GbE between nodes (10 us, 1.25 GB/s), shared memory inside (0.5 us, 10 GB/s), no
    gamma: the flat ring pays the network at each step, hierarchical only among the leaders."""
    table = predicted_table(capsys, "--ppn", "4", "--nodes", "1,2,4", "--network", "10gbe")
    m = LENET_BYTES
    a_in, b_in, a_out, b_out = 0.5e-6, 1 / 10e9, 10e-6, 1 / 1.25e9
    for n in (2, 4):
        p = 4 * n
        ring = 2 * (p - 1) * (a_out + m / p * b_out)
        hier = 2 * 2 * (a_in + m * b_in) + 2 * (n - 1) * (a_out + m / n * b_out)
        assert table[n, "ring"] == pytest.approx(1e3 * ring, abs=1e-3)
        assert table[n, "hierarchical"] == pytest.approx(1e3 * hier, abs=1e-3)
        tree = 2 * 4 * (a_out + m * b_out) if n == 4 else 2 * 3 * (a_out + m * b_out)
        assert table[n, "tree"] == pytest.approx(1e3 * tree, abs=1e-3)
    assert table[1, "ring"] == pytest.approx(1e3 * 2 * 3 * (a_in + m / 4 * b_in), abs=1e-3)
    assert table[2, "fastest"] == "hierarchical"


def test_predict_cli_reads_fitted_levels_and_overrides(capsys, tmp_path):
    path = tmp_path / "levels.json"
    save_levels(path, {"intra": INTRA, "inter": INTER})
    table = predicted_table(capsys, "--levels", str(path), "--ppn", "2", "--nodes", "4")
    m = LENET_BYTES
    want = predict_hierarchical(m, 4, 2, INTRA, INTER)
    assert table[4, "hierarchical"] == pytest.approx(1e3 * want, abs=1e-3)
    assert table[4, "ring"] == pytest.approx(1e3 * predict("ring", m, 8, INTER), abs=1e-3)
    slow = predicted_table(capsys, "--ppn", "2", "--nodes", "4", "--intra-bandwidth-gbs", "0.01")
    assert slow[4, "fastest"] != "hierarchical"  # a slow node inside makes the tree-in-node cost
    with pytest.raises(SystemExit, match="cannot read --levels .*No such file.*--save-levels"):
        main(["predict", "--model", "lenet5", "--levels", str(tmp_path / "missing.json")])


def test_predict_scaling_uses_each_node_counts_fastest_allreduce_of_the_levels(capsys, tmp_path):
    """--scaling: n = nodes x ppn workers, each exchanging by the fastest algorithm of the
    per-level table; with the roofline calibrated to T(B) = 0.1 s, speedup = 0.1 s / T(n)."""
    path = tmp_path / "levels.json"
    save_levels(path, {"intra": INTRA, "inter": INTER})
    argv = ["predict", "--model", "lenet5", "--levels", str(path), "--ppn", "2", "--nodes", "1,2,4"]
    argv += "--scaling --compute roofline --time-per-iteration 0.1 --batch 64".split()
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    blank = lines.index("")
    head = lines[1].split()
    fastest = {}
    for line in lines[3:blank]:
        cells = line.split()
        fastest[int(cells[1])] = min(float(c) for c in cells[2:-1])
    scaling = [line.split() for line in lines[blank + 4 : blank + 7]]
    assert head[-1] == "fastest" and [int(r[0]) for r in scaling] == [2, 4, 8]
    for n, b, compute_ms, comm_ms, iteration_ms, speedup, *_ in scaling:
        assert int(b) == 64 // int(n)
        assert float(comm_ms) == pytest.approx(fastest[int(n)], abs=0.006)
        assert float(iteration_ms) == pytest.approx(float(compute_ms) + float(comm_ms), abs=0.02)
        assert float(speedup) == pytest.approx(100 / float(iteration_ms), abs=0.006)
