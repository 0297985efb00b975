"""Memory per rank (``perf.memory``, ``dist.memory``): the formulas against what one process
measures (tracked bytes of a real loop, the graph's bytes of real forwards), ZeRO's shares
against numbers worked out by hand, a pipeline's activations in flight against the
schedules' closed forms."""

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.conv.winograd import tile_counts
from minidl.dist.grid import GridShape
from minidl.dist.memory import predict_memory
from minidl.dist.pipeline import build
from minidl.perf.graph_memory import graph_bytes
from minidl.perf.memory import (
    STATE_ARRAYS,
    activation_bytes,
    layer_activations,
    model_state,
    peak_in_flight,
    zero_share,
)
from minidl.perf.pipeline_simulate import simulate
from minidl.train.loop import train_epoch
from minidl.train.memory_record import MemoryRecord

IMAGE = (1, 28, 28)
CLASSES = 10


def batch_of(rows, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, *IMAGE)).astype(dtype), rng.integers(0, CLASSES, rows)


def test_every_update_rule_is_priced():
    assert set(STATE_ARRAYS) == set(optim.OPTIMIZERS)


@pytest.mark.parametrize("rule", sorted(optim.OPTIMIZERS))
@pytest.mark.parametrize("name, dtype", [("lenet5", "float32"), ("mlp", "float64")])
def test_a_loop_measures_the_predicted_bytes_of_every_kind(name, dtype, rule):
    """Two steps of the loop with ``MemoryRecord``: parameters, gradients, optimizer state and
    activations equal ``predict_memory``'s, and the state is K arrays like the weights."""
    md.manual_seed(0)
    model = md.models.build(name).to(dtype)
    opt = optim.OPTIMIZERS[rule](model.parameters(), lr=0.01)
    record = MemoryRecord(model, opt)
    batches = [batch_of(8, dtype, seed) for seed in range(3)]
    train_epoch(model, opt, batches, callbacks=[record])
    measured = record.after_epoch(1, {})[0]
    predicted = predict_memory(model, IMAGE, 8, rule)[0].memory
    weights = sum(p.data.nbytes for p in model.parameters())
    assert measured["params"] == [predicted.params] == [weights]
    assert measured["grads"] == [predicted.grads] == [weights]
    assert measured["state"] == [predicted.state] == [STATE_ARRAYS[rule] * weights]
    assert measured["activations"] == [predicted.activations]
    assert measured["max_rss"][0] > weights


def winograd_tails(model, x):
    """Bytes of each Winograd output's buffer after its last element, which the graph does not
    count: of N x (m ceil(H'/m)) x (m ceil(W'/m)) x K tiles, the view ends ((Hp - H' + 1) Wp -
    W') K numbers before the end."""
    model(x)  # the layers now know their algorithms
    tails, h = 0, x
    for layer in model:
        y = layer(h)
        name = layer.algorithms().get("forward", "") if isinstance(layer, L.Conv2d) else ""
        if name.startswith("winograd"):
            m = int(name[len("winograd_f")])
            rows, columns = tile_counts(y.shape[2], y.shape[3], m)
            tails += ((m * rows - y.shape[2] + 1) * m * columns - y.shape[3]) * y.shape[1]
        h = y
    return tails * x.data.itemsize


@pytest.mark.parametrize("algo", ["auto", "direct", "im2col", "fft"])
@pytest.mark.parametrize("name", ["lenet5", "alexnet-small", "mlp"])
def test_the_activation_formula_is_the_graphs_bytes(name, algo):
    """After a real forward the graph (and the output, which the loss keeps) holds what
    ``layer_activations`` sums; the loss adds its probabilities and the labels, N (C b + 8).
    Winograd's outputs view whole tiles: the formula counts them, the graph up to the last
    element used."""
    if name == "mlp" and algo != "auto":
        pytest.skip("no convolution")
    md.manual_seed(0)
    model = md.models.build(name, conv_algo=algo)
    images, labels = batch_of(6)
    x = md.Tensor(images)
    tails = winograd_tails(model, x) if algo == "auto" else 0
    assert (tails > 0) == (name == "alexnet-small" and algo == "auto")
    held, rebuilt = activation_bytes(layer_activations(model, IMAGE, 6))
    out = model(x)
    assert (held, rebuilt) == (graph_bytes(out, with_root=True) + tails, 0)
    loss = F.cross_entropy(out, labels)
    assert graph_bytes(loss) - graph_bytes(out, with_root=True) == 6 * (CLASSES * 4 + 8)


@pytest.mark.parametrize("segments", [1, 2, 3, 5])
@pytest.mark.parametrize("name", ["lenet5", "alexnet-small"])
def test_recomputation_keeps_the_segment_inputs_and_rebuilds_one_segment(name, segments):
    """Recomputed, the graph holds the segments' inputs and the output; backward rebuilds each
    segment's graph in turn, the largest as the formula says (im2col: no Winograd tiles)."""
    md.manual_seed(0)
    model = md.models.build(name, conv_algo="im2col")
    recomputed = L.Recompute(model, segments)
    layers = layer_activations(model, IMAGE, 6)
    held, rebuilt = activation_bytes(layers, recomputed.bounds)
    x = md.Tensor(batch_of(6)[0])
    assert held == graph_bytes(recomputed(x), with_root=True)
    rebuilt_graphs, h = [], x
    for start, stop in recomputed.bounds:  # each segment as backward reruns it
        h = md.Tensor(h.data, requires_grad=start > 0)
        for layer in list(model)[start:stop]:
            h = layer(h)
        rebuilt_graphs.append(graph_bytes(h, with_root=True))
    assert rebuilt == max(rebuilt_graphs)
    assert held < activation_bytes(layers)[0]  # the peak, held + rebuilt, need not be


def small_mlp():
    """7*5+5, 5*6+6, 6*3+3: 97 parameters in six arrays."""
    md.manual_seed(0)
    return L.Sequential(L.Linear(7, 5), L.Tanh(), L.Linear(5, 6), L.ReLU(), L.Linear(6, 3)).to(
        "float64"
    )


# numbers worked out by hand for ``small_mlp`` with Adam (K = 2), float64 (b = 8)
ONE_BUCKET = {2: (49, 48), 3: (33, 32, 32)}  # 97 cut in blocks differing by at most one
# buckets of 40 numbers at most, last parameter first: 3+18+6 = 27, 30+5 = 35, 35;
# each cut in 3: 9 9 9 | 12 12 11 | 12 12 11
SMALL_BUCKETS = {3: (33, 33, 31)}


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_shares_of_a_small_model_as_worked_out_by_hand(ranks, stage):
    model = small_mlp()
    predicted = predict_memory(model, (7,), 4, "adam", GridShape(dp=ranks), zero=stage)
    for rank, share in enumerate(ONE_BUCKET[ranks]):
        m = predicted[rank].memory
        weights = {0: 97, 1: 97, 2: 97, 3: share + 40}[stage]  # stage 3: + Linear(7, 5)
        grads = 97 if stage < 2 else share
        state = 2 * (97 if stage == 0 else share)
        assert (m.params, m.grads, m.state) == (8 * weights, 8 * grads, 8 * state)


def test_zero_cuts_each_bucket():
    model = small_mlp()
    bucket_mb = 40 * 8 / 2**20
    predicted = predict_memory(
        model, (7,), 4, "momentum", GridShape(dp=3), zero=2, bucket_mb=bucket_mb
    )
    assert [r.memory.grads // 8 for r in predicted] == list(SMALL_BUCKETS[3])
    assert zero_share([27, 35, 35], 3, 2) == 31
    assert model_state(97, 1, 8, zero=2, share=31).state == 8 * 31
    with pytest.raises(ValueError, match="ZeRO stage 4"):
        model_state(97, 1, 8, zero=4)


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("micro_batches", [1, 2, 5, 8, 12])
def test_micro_batches_in_flight_follow_the_schedules(ranks, micro_batches):
    """1F1B and PipeDream keep min(M, P - k) micro-batches on stage k, GPipe M, naive 1,
    interleaved (v chunks) min(v M, (v - 1) P + 2 (P - r) - 1) on rank r; with one byte per
    micro-batch every schedule's walk is the simulator's peak of live activations."""
    forms = {
        "1f1b": lambda k: min(micro_batches, ranks - k),
        "pipedream": lambda k: min(micro_batches, ranks - k),
        "gpipe": lambda k: micro_batches,
        "naive": lambda k: 1,
    }
    for schedule, form in forms.items():
        programs = build(schedule, ranks, micro_batches)
        assert [peak_in_flight(p, [1]) for p in programs] == [form(k) for k in range(ranks)]
    for v in (2, 3):
        if micro_batches % ranks == 0:
            programs = build("interleaved", ranks, micro_batches, v)
            held = [peak_in_flight(p, [1] * v) for p in programs]
            form = [
                min(v * micro_batches, (v - 1) * ranks + 2 * (ranks - r) - 1) for r in range(ranks)
            ]
            assert held == form
    for schedule, chunks in [("pipedream", 1), ("interleaved", 2)]:
        if schedule == "interleaved" and micro_batches % ranks:
            continue
        programs = build(schedule, ranks, micro_batches, chunks)
        unit = [peak_in_flight(p, [1] * chunks) for p in programs]
        assert unit == list(simulate(programs).peak_live)


def test_a_pipeline_rank_holds_its_stages():
    """pp=3 over LeNet-5's 12 layers: the stages' parameters add up to the model's, each
    stage's activations are its micro-batch's times the micro-batches 1F1B keeps."""
    model = md.models.build("lenet5")
    ranks = predict_memory(model, IMAGE, 8, "sgd", GridShape(pp=3), micro_batches=4)
    assert sum(r.parameters for r in ranks) == model.num_parameters()
    layers = layer_activations(model, IMAGE, 2)
    for k, rank in enumerate(ranks):
        ((_, start, stop),) = rank.stages
        received = layers[start - 1].output if start else 0
        one = activation_bytes(layers[start:stop])[0] + received
        assert rank.memory.activations == min(4, 3 - k) * one
        assert rank.memory.state == 0


def test_a_grid_that_does_not_fit_is_refused():
    model = md.models.build("lenet5")
    with pytest.raises(ValueError, match="tp=7 is wider than layer 0 .* tp <= 6 fits"):
        predict_memory(model, IMAGE, 8, grid=GridShape(tp=7))
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        predict_memory(model, IMAGE, 8, "lamb")
