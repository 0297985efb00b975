"""The course examples run as a student runs them, at small settings, and teach what they claim.

Each example is started as a script (a fresh interpreter, as on the command
line; the MPI ones under mpiexec) with the flags its docstring gives for a
quick run, and its output must show the thing it teaches: a model that
learned (chance is 10%), replicas that stayed identical, a staleness bound,
error feedback rescuing top-k and sign, a table with a row per case.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl_app.launch import mpi_unavailable_reason, run_mpi

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples")
ROOT = os.path.abspath(os.path.join(EXAMPLES, os.pardir))
ENV = {"OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": ROOT}
TIMEOUT = 300


def _has_data():
    try:
        FashionMNIST(train=False)
    except DatasetNotFoundError:
        return False
    return True


needs_data = pytest.mark.skipif(not _has_data(), reason="Fashion-MNIST not found (make data)")


def run_example(name, *args):
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, **ENV},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def run_mpi_example(nprocs, name, *args):
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    result = run_mpi(
        nprocs, [os.path.join(EXAMPLES, name), *map(str, args)], timeout=TIMEOUT, env=ENV
    )
    assert not result.timed_out, f"hung for {result.seconds:.0f} s:\n{result.output[-2000:]}"
    assert result.returncode == 0, result.output[-2000:]
    return result.output


def accuracies(out):
    return [float(a) for a in re.findall(r"test accuracy ([\d.]+)%", out)]


def test_every_example_is_tested_here():
    with open(__file__) as source:
        text = source.read()
    for name in sorted(os.listdir(EXAMPLES)):
        if name.endswith(".py"):
            assert f'"{name}"' in text, f"{name} has no test in {__file__}"


@needs_data
def test_mlp_example_learns_in_one_epoch():
    out = run_example("01_mlp_fashion_mnist.py", "--epochs", "1")
    assert accuracies(out)[-1] >= 80.0, out


@needs_data
def test_mlp_example_learns_on_a_subset():
    out = run_example("01_mlp_fashion_mnist.py", "--epochs", 1, "--subset", 10000)
    assert accuracies(out)[-1] >= 70.0, out


@needs_data
def test_lenet_example_learns_in_one_epoch():
    out = run_example("02_lenet5_fashion_mnist.py", "--epochs", "1", "--conv-algo", "im2col")
    assert accuracies(out)[-1] >= 80.0, out
    assert "61,706 parameters" in out


@needs_data
def test_alexnet_small_example_learns_on_a_subset():
    out = run_example(
        "03_alexnet_small_fashion_mnist.py", "--epochs", 1, "--subset", 2000, "--test-subset", 1000
    )
    assert re.search(r"AlexNet-small: [\d,]+ parameters", out), out
    assert accuracies(out)[-1] >= 25.0, out


@needs_data
def test_optimizer_example_trains_all_six_rules_and_plots(tmp_path):
    out = run_example(
        "04_compare_optimizers.py",
        "--steps",
        50,
        "--test-subset",
        1000,
        "--out",
        tmp_path / "optimizers.png",
    )
    rows = dict(
        re.findall(r"^(\w+)\s+final loss [\d.]+\s+test accuracy ([\d.]+)%", out, re.MULTILINE)
    )
    assert sorted(rows) == sorted(["sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam"])
    assert all(float(a) >= 25.0 for a in rows.values()), out
    assert (tmp_path / "optimizers.png").stat().st_size > 0


def test_conv_example_times_every_algorithm_that_fits_and_plots(tmp_path):
    out = run_example(
        "05_conv_algorithms.py",
        "--layers",
        "lenet.conv2",
        "--batch-size",
        1,
        "--repeats",
        1,
        "--out",
        tmp_path / "conv.png",
    )
    errors = dict(
        re.findall(r"^lenet\.conv2\s+(\S+)\s+fwd .* error ([\d.e+-]+)", out, re.MULTILINE)
    )
    # LeNet's 5x5 kernels: the 3x3 Winograd tiles cannot run and have no row
    assert sorted(errors) == ["auto", "direct", "fft", "im2col"], out
    assert all(float(e) < 1e-4 for e in errors.values()), out
    assert (tmp_path / "conv.png").stat().st_size > 0


def test_allreduce_lab_measures_every_algorithm_at_each_size(tmp_path):
    out = run_mpi_example(2, "06_allreduce_lab.py", tmp_path / "allreduce.png", "--sizes", "1K,64K")
    for size in ("1 KiB", "64 KiB"):
        row = next(line for line in out.splitlines() if line.startswith(size))
        assert len(re.findall(r"\d+\.\d+", row)) >= 5, (
            row
        )  # mpi, ring, butterfly, tree, rabenseifner
    assert (tmp_path / "allreduce.png").stat().st_size > 0


@needs_data
def test_data_parallel_example_keeps_replicas_identical_and_learns():
    out = run_mpi_example(2, "07_data_parallel_lenet.py", "--subset", 6000, "--test-subset", 1000)
    assert "replicas bit-identical: True" in out, out
    assert accuracies(out)[-1] >= 30.0, out


@needs_data
def test_consistency_lab_bounds_the_staleness_by_ssp_s():
    out = run_mpi_example(
        3, "08_consistency_lab.py", "--mode", "ssp:2", "--epochs", 1, "--subset", 4000
    )
    assert int(re.search(r"staleness: mean [\d.]+, max (\d+)", out).group(1)) <= 2, out
    assert re.search(r"gradients per worker \[\d+, \d+\]", out), out


def test_compression_lab_shows_error_feedback_rescuing_topk_and_sign():
    out = run_example("09_compression_lab.py", "--steps", 300, "--dim", 50)
    rows = re.findall(r"^\s*(\S+)\s+(on|off)\s+\d+\s+[\d.]+\s+([\d.e+-]+)$", out, re.MULTILINE)
    error = {(scheme, feedback): float(e) for scheme, feedback, e in rows}
    assert len(rows) == 9, out
    for scheme in ("topk:0.01", "sign"):
        assert error[scheme, "on"] < error[scheme, "off"] / 2, out
    assert error["fp16", "off"] < 1.01 * error["none", "off"], out


def test_scaling_example_predicts_both_networks_and_plots(tmp_path):
    out = run_example("10_predict_scaling.py", "--out", tmp_path)
    assert "=== AlexNet" in out and "=== GoogLeNet" in out
    assert len(re.findall(r"^\s*512\s", out, re.MULTILINE)) == 4, (
        out
    )  # tree and ring, both networks
    assert out.count("- best speedup") == 4, out
    assert (tmp_path / "predicted_speedup.png").stat().st_size > 0


@needs_data
def test_fit_example_trains_alone_on_workers_and_under_mpiexec(tmp_path):
    """The README's script in its three modes: each writes its run; the two data-parallel
    ones (2 workers splitting batches of 64, 2 MPI ranks of 32 each) are the same bits."""
    common = ("--subset", 1024, "--epochs", 1)
    alone = run_example("11_fit.py", *common, "--out", tmp_path / "alone")
    workers = run_example("11_fit.py", *common, "--workers", 2, "--out", tmp_path / "workers")
    ranks = run_mpi_example(
        2, "11_fit.py", *common, "--dist", "--batch-size", 32, "--out", tmp_path / "mpi"
    )
    for out in (alone, workers, ranks):
        assert accuracies(out)[-1] > 40.0, out
    sizes = [
        json.load(open(tmp_path / run / "config.json"))["world_size"]
        for run in ("alone", "workers", "mpi")
    ]
    assert sizes == [1, 2, 2]
    with (
        np.load(tmp_path / "workers" / "checkpoint.npz") as a,
        np.load(tmp_path / "mpi" / "checkpoint.npz") as b,
    ):
        for key in a.files:
            if key.startswith("model/"):
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)


PIPELINE_ROW = re.compile(
    r"^(naive|gpipe|1f1b|pipedream|interleaved)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(?:([\d.]+)\s+)?"
    r"\[([\d, ]+)\]\s+\[([\d, ]+)\]$",
    re.MULTILINE,
)


def pipeline_rows(out):
    """{schedule: (formula, simulated, measured costs, wall-clock or None, peaks, KiB)}."""
    rows = {}
    for name, formula, equal, measured, wall, peaks, kib in PIPELINE_ROW.findall(out):
        rows[name] = (
            float(formula),
            float(equal),
            float(measured),
            float(wall) if wall else None,
            [int(v) for v in peaks.split(",")],
            [int(v) for v in kib.split(",")],
        )
    assert sorted(rows) == sorted(["naive", "gpipe", "1f1b", "pipedream", "interleaved"]), out
    return rows


def assert_textbook_pipeline(rows, p, m, v):
    """Equal stages: the simulated bubble is the formula; GPipe holds M, 1F1B P - s."""
    formulas = {
        "naive": (p - 1) / p,
        "gpipe": (p - 1) / (m + p - 1),
        "1f1b": (p - 1) / (m + p - 1),
        "pipedream": (p - 1) / (m + p - 1),  # 1F1B's order
        "interleaved": (p - 1) / (v * m + p - 1),
    }
    for name, (formula, equal, _, _, _, kib) in rows.items():
        assert abs(formula - formulas[name]) < 1e-4 and equal == formula, (name, rows[name])
        assert all(k > 0 for k in kib), (name, kib)
    assert rows["naive"][2] == rows["naive"][0]  # one micro-batch at a time: (P-1)/P anyway
    for name in ("gpipe", "1f1b"):  # unequal measured stages only add to the bubble
        assert rows[name][2] >= rows[name][0] - 1e-4, (name, rows[name])
    assert rows["naive"][4] == [1] * p
    assert rows["gpipe"][4] == [m] * p
    assert rows["1f1b"][4] == [min(p - s, m) for s in range(p)] == rows["pipedream"][4]
    assert rows["gpipe"][5][0] > rows["1f1b"][5][0] > rows["naive"][5][0]


def test_pipeline_example_alone_simulates_the_textbook_bubble_and_memory(tmp_path):
    png = tmp_path / "timelines.png"
    out = run_example(
        "12_pipeline_schedules.py",
        *("--micro-batches", 8, "--batch-size", 32, "--repeats", 1, "--png", png),
    )
    assert_textbook_pipeline(pipeline_rows(out), 4, 8, 2)
    assert png.exists() or "matplotlib is not installed" in out, out


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_pipeline_example_under_mpiexec_trains_every_schedule_and_measures_it():
    out = run_mpi_example(
        4,
        "12_pipeline_schedules.py",
        *("--micro-batches", 8, "--batch-size", 16, "--repeats", 1, "--steps", 1),
    )
    rows = pipeline_rows(out)
    assert_textbook_pipeline(rows, 4, 8, 2)
    assert all(0 <= row[3] < 1 for row in rows.values()), out


def test_imagenet_folder_example_trains_alexnet_on_a_generated_folder(tmp_path, monkeypatch):
    pytest.importorskip("PIL")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the colour statistics' cache
    options = "--demo --epochs 1 --crop-size 63 --resize 72 --batch-size 8".split()
    out = run_example("13_imagenet_folder.py", *options)
    assert "epoch 1/1" in out and "on 12 validation images" in out, out
    assert "top-5 error 0.0%" in out  # three classes: always in the top five


def test_imagenet_example_writes_val_labels_from_the_solution_file(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "imagenet_example", os.path.join(EXAMPLES, "13_imagenet_folder.py")
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    solution = tmp_path / "LOC_val_solution.csv"
    solution.write_text(
        "ImageId,PredictionString\n"
        "ILSVRC2012_val_00000002,n01440764 12 34 56 78 n01440764 1 2 3 4\n"
        "ILSVRC2012_val_00000001,n09999999 0 0 10 10\n"
    )
    path = example.write_val_labels(solution, tmp_path)
    assert path.read_text().splitlines() == [
        "ILSVRC2012_val_00000001.JPEG n09999999",
        "ILSVRC2012_val_00000002.JPEG n01440764",
    ]


@needs_data
@pytest.mark.mpi
def test_model_parallel_layouts_example_trains_one_process_weights_with_the_predicted_bytes():
    out = run_mpi_example(2, "14_model_parallel_layouts.py", "--steps", 3)
    rows = re.findall(r"^(.+\(.+\))\s+[\d.]+\s+([\d,]+)\s+([\d,]+)\s+(\S+)$", out, re.M)
    names = [r[0].split(" (")[0] for r in rows]
    assert names == ["data", "tensor", "spatial", "one weird trick"], out
    for name, sent, formula, gap in rows:
        assert sent == formula and float(gap) <= 1e-10, name


@pytest.mark.mpi
def test_zero_memory_example_holds_the_predicted_bytes_and_the_plain_weights(tmp_path):
    out = run_mpi_example(2, "15_zero_memory.py", "--steps", 2, "--plot", tmp_path / "15.png")
    cell = r"([\d,]+) \(([\d,]+)\)\s+"
    rows = re.findall(rf"^(\d)\s+(\d)\s+{cell * 3}([\d.]+) \(([\d.]+)\)\s+(\S+)$", out, re.M)
    stages_and_ranks = [(stage, rank) for stage, rank, *_ in rows]
    assert stages_and_ranks == [(s, r) for s in "0123" for r in "01"], out
    ratios = {}
    for stage, rank, *cells, ratio, ratio_predicted, gap in rows:
        params, params_predicted, grads, grads_predicted, state, state_predicted = (
            int(c.replace(",", "")) for c in cells
        )
        if stage == "0":
            whole = params
        assert params == params_predicted and state == state_predicted, out
        assert state == (whole if stage == "0" else whole // 2), out  # momentum: K = 1
        if stage == "3":  # its share, and the largest layer gathered
            assert state < params < whole, out
        else:
            assert params == whole, out
        if stage in "23":  # its share, and for a moment the bucket backward completes
            assert grads_predicted == state < grads < whole, out
        else:
            assert grads == grads_predicted == whole, out
        ratios.setdefault(rank, []).append(float(ratio))
        assert float(ratio_predicted) <= float(ratio), out
        assert float(gap) <= 1e-6, out
    for held in ratios.values():
        assert held[0] == 1.0 and all(a > b for a, b in zip(held, held[1:])), out
    assert (tmp_path / "15.png").stat().st_size > 0


@needs_data
@pytest.mark.mpi
def test_sync_batchnorm_example_drifts_without_sync_and_equals_one_process_with_it():
    out = run_mpi_example(2, "16_sync_batchnorm.py", "--steps", 3)
    rows = re.findall(r"^(\d+)\s+(\S+)\s+(\S+)$", out, re.M)
    assert [int(step) for step, _, _ in rows] == [1, 2, 3], out
    for _, plain, synced in rows:
        assert float(plain) > 1e-4 and float(synced) <= 1e-10, out
    verdicts = [line for line in out.splitlines() if line.startswith("verify: ")]
    assert len(verdicts) == 2, out
    assert "differ from one process; the first: step 0: output of layer bn:" in verdicts[0], out
    assert "sync-bn equals one process" in verdicts[1], out
