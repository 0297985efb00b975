"""`mpiexec -n N minidl train --dist sync`: sharded data, rank-0 outputs, global metrics, resume."""

import json
import os

import numpy as np
import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.checkpoint import load_checkpoint
from minidl_app.cli import main

pytestmark = pytest.mark.mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

COMMON = ["--model", "lenet5", "--subset", "1280", "--no-progress"]


def train_mpi(mpi_run, nprocs, *args):
    result = mpi_run(nprocs, "-m", "minidl", "train", *COMMON, *args, timeout=180)
    assert not result.timed_out and result.returncode == 0, result.output
    return result


def weights(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz")).model_state


def test_two_ranks_equal_one_process_with_twice_the_batch_across_a_resume(mpi_run, tmp_path):
    """1 epoch on 2 ranks x 32, resumed for a 2nd on 1 process x 64 == 2 epochs of 1 x 64.

    In float64, so that the comparison does not depend on the CPU or on the
    BLAS thread count (the ranks run 1 thread, this process may run more):
    the two sides add the same products in different orders (two half-batch
    gradients averaged, against one whole-batch GEMM), which differs by
    ~1e-16 relative per step in float64; 40 steps of momentum SGD keep that
    below 1e-12 (in float32 the same difference grows to ~1e-4).
    """
    split, straight = str(tmp_path / "split"), str(tmp_path / "straight")
    result = train_mpi(
        mpi_run,
        2,
        "--dist",
        "sync",
        "--batch-size",
        "32",
        "--epochs",
        "1",
        "--dtype",
        "float64",
        "--out",
        split,
    )
    assert result.output.count("epoch 1/1") == 1  # only rank 0 reports
    assert (
        main(
            [
                "train",
                *COMMON,
                "--batch-size",
                "64",
                "--epochs",
                "2",
                "--resume",
                os.path.join(split, "checkpoint.npz"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                *COMMON,
                "--batch-size",
                "64",
                "--epochs",
                "2",
                "--dtype",
                "float64",
                "--out",
                straight,
            ]
        )
        == 0
    )
    a, b = weights(split), weights(straight)
    for k in a:
        assert a[k].dtype == np.float64
        err = np.linalg.norm(a[k] - b[k]) / np.linalg.norm(b[k])
        assert err < 1e-9, f"{k}: {err:.2e}"
    records = [json.loads(line) for line in open(os.path.join(split, "metrics.jsonl"))]
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]


def test_grid_dp_2_is_dist_sync_on_two_ranks_bit_for_bit(mpi_run, tmp_path):
    """The default flags are reproducible under MPI (no timing decides an algorithm), and
    ``--grid dp=N`` is ``--dist sync`` on N ranks."""
    runs = []
    for name, layout in (("sync", ["--dist", "sync"]), ("grid", ["--grid", "dp=2"])):
        out = str(tmp_path / name)
        train_mpi(mpi_run, 2, *layout, "--batch-size", "32", "--epochs", "1", "--out", out)
        runs.append(weights(out))
    for k in runs[0]:
        assert runs[0][k].tobytes() == runs[1][k].tobytes(), k


def test_a_grid_that_does_not_fit_the_job_is_refused_before_any_work(mpi_run, tmp_path):
    command = ["-m", "minidl", "train", *COMMON, "--grid", "dp=3", "--out", str(tmp_path / "g")]
    result = mpi_run(2, *command, timeout=60)
    assert result.returncode != 0
    assert "needs 3 ranks but the job has 2" in result.output, result.output
    assert not (tmp_path / "g" / "metrics.jsonl").exists()


def test_three_ranks_count_every_test_image_once(mpi_run, tmp_path):
    out = str(tmp_path / "three")
    train_mpi(
        mpi_run,
        3,
        "--dist",
        "sync",
        "--batch-size",
        "16",
        "--epochs",
        "1",
        "--allreduce",
        "ring",
        "--bucket-mb",
        "0.05",
        "--out",
        out,
    )
    record = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())
    config = json.load(open(os.path.join(out, "config.json")))
    assert config["world_size"] == 3
    assert record["test_images"] == 10000 and record["train_images"] == 1280
    assert sorted(os.listdir(out)) == [
        "checkpoint.npz",
        "config.json",
        "curves.png",
        "metrics.jsonl",
    ]


def test_mpiexec_without_dist_is_refused(mpi_run):
    result = mpi_run(2, "-m", "minidl", "train", *COMMON, "--epochs", "1", timeout=60)
    assert result.returncode != 0
    assert "add --dist sync" in result.output


def test_a_diverging_sync_run_stops_every_rank_without_hanging(mpi_run, tmp_path):
    result = mpi_run(
        2,
        "-m",
        "minidl",
        "train",
        *COMMON,
        "--dist",
        "sync",
        "--epochs",
        "1",
        "--optimizer",
        "sgd",
        "--lr",
        "1e30",
        "--out",
        str(tmp_path / "nan"),
        timeout=120,
    )
    assert not result.timed_out, result.output
    assert result.returncode == 3, result.output
    assert "averaged over all ranks is not finite" in result.output
    assert not (tmp_path / "nan" / "checkpoint.npz").exists()


def check_zero_equals_plain_sync(mpi_run, tmp_path, stage, subset):
    """``--zero stage`` and plain ``--dist sync`` on 3 ranks (Adam, float64, ``subset``
    samples) write checkpoints whose weights and optimizer state agree to 1e-10 (runs in
    tmp_path/plain and tmp_path/zero)."""
    flags = ["--batch-size", "8", "--epochs", "1", "--dtype", "float64", "--optimizer", "adam"]
    flags += ["--lr", "0.002", "--subset", str(subset), "--test-subset", "100"]
    runs = {}
    for name, zero in (("plain", []), ("zero", ["--zero", stage])):
        out = str(tmp_path / name)
        train_mpi(mpi_run, 3, "--dist", "sync", *flags, *zero, "--out", out)
        runs[name] = load_checkpoint(os.path.join(out, "checkpoint.npz"))
    plain, zero = runs["plain"], runs["zero"]
    for key, value in plain.model_state.items():
        assert np.abs(zero.model_state[key] - value).max() <= 1e-10, key
    for mine, theirs in zip(zero.optimizer_state["state"], plain.optimizer_state["state"]):
        for key, value in theirs.items():
            assert np.abs(np.asarray(mine[key]) - value).max() <= 1e-10, key


@pytest.mark.parametrize("stage", ("1", "2"))
def test_zero_trains_the_weights_and_state_of_plain_sync_and_resumes_in_one_process(
    mpi_run, tmp_path, stage
):
    """``--zero 1|2`` on 3 ranks (uneven shards), Adam, float64: weights and optimizer state
    of the checkpoint equal plain ``--dist sync``'s; a process alone resumes it."""
    check_zero_equals_plain_sync(mpi_run, tmp_path, stage, subset=240)
    resumed = str(tmp_path / "zero" / "checkpoint.npz")
    assert main(["train", "--resume", resumed, "--epochs", "2", "--no-progress"]) == 0


def test_zero3_trains_plain_sync_s_weights_with_an_empty_share_and_resumes_on_other_layouts(
    mpi_run, tmp_path
):
    """``--zero 3`` on 3 ranks, Adam, float64, 242 samples (the last batch of 2 leaves rank 2
    none): the checkpoint's weights and optimizer state equal plain ``--dist sync``'s; it
    resumes in one process and under ``--zero 3`` on 2 ranks to the same weights."""
    check_zero_equals_plain_sync(mpi_run, tmp_path, "3", subset=242)
    saved = str(tmp_path / "zero" / "checkpoint.npz")
    alone, two = str(tmp_path / "alone"), str(tmp_path / "two")
    resume = ["--resume", saved, "--epochs", "2", "--no-progress"]
    assert main(["train", *resume, "--out", alone]) == 0
    result = mpi_run(
        2, "-m", "minidl", "train", *resume, "--dist", "sync", "--out", two, timeout=180
    )
    assert not result.timed_out and result.returncode == 0, result.output
    with open(os.path.join(two, "config.json")) as f:
        assert json.load(f)["zero"] == 3  # restored with --dist
    a, b = weights(alone), weights(two)
    for key, value in a.items():
        assert np.abs(b[key] - value).max() <= 1e-10, key


@pytest.mark.parametrize(
    "flags, hint",
    [
        (["--dist", "ssp:1", "--zero", "1"], "--zero shards the replicas of --dist sync"),
        (["--dist", "sync", "--zero", "3", "--trace"], "--trace times each layer's forward"),
        (["--grid", "dp=2,spatial=2", "--zero", "3"], "not beside spatial blocks"),
        (["--dist", "sync", "--zero", "2", "--compress", "fp16"], "reduce-scatters gradients"),
        (["--dist", "sync", "--zero", "1", "--clip-grad-norm", "1"], "no rank"),
        (["--grid", "pp=2", "--zero", "1"], "--zero with a pipeline"),
        (["--zero", "1"], "start it under mpiexec"),
    ],
)
def test_zero_where_it_cannot_shard_is_refused_in_one_line(flags, hint, capsys):
    assert main(["train", *COMMON, *flags]) == 1
    err = capsys.readouterr().err
    assert hint in err and err.count("\n") == 1, err
