"""Training across emulated nodes (``scripts/cluster.py``) equals training in one process.

Every job here runs on 2 nodes that talk TCP over their own links, under the
MPI of the running Python (MPICH or Open MPI). float64 everywhere an answer
is compared, so that the comparisons do not depend on summation order.
"""

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

# 480 images, 48 per step: 2 nodes x 2 ranks x 12, 3 ranks x 16, 1 process x 48; evaluated
# on 500 test images (the whole test set took most of each job's time)
COMMON = (
    "--model lenet5 --subset 480 --no-progress --dtype float64 --conv-algo im2col "
    "--optimizer momentum --lr 0.02 --test-subset 500"
).split()


def train(cluster, ranks, *args):
    result = cluster.run(ranks, "-m", "minidl", "train", *COMMON, *args, timeout=240)
    assert not result.timed_out, f"hung:\n{result.output}"
    assert result.returncode == 0, result.output
    return result


def weights(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz")).model_state


def assert_same_weights(a, b, tol=1e-9):
    for k in b:
        err = np.linalg.norm(a[k] - b[k]) / np.linalg.norm(b[k])
        assert err < tol, f"{k}: relative difference {err:.2e}"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The oracle: 2 epochs of 48 images per step in this process."""
    out = str(tmp_path_factory.mktemp("one") / "run")
    assert main(["train", *COMMON, "--batch-size", "48", "--epochs", "2", "--out", out]) == 0
    return out


def test_sync_on_two_nodes_reading_local_disks_resumes_on_one_process_and_on_three_ranks(
    cluster, one_process, tmp_path
):
    """Epoch 1 on 2 nodes x 2 ranks, each node reading Fashion-MNIST from its own disk
    (the folder does not exist outside the nodes); epoch 2 resumed from its checkpoint on
    1 process, and on 3 ranks over the 2 nodes: both equal 2 epochs in one process."""
    c = cluster(2)
    local = c.copy_data_to_local_disks()
    assert not os.listdir(local)  # outside the nodes, the local-disk path is empty
    split = str(tmp_path / "split")
    options = "--dist sync --batch-size 12 --epochs 1".split()
    result = train(c, 2, *options, "--data-dir", local, "--out", split)
    assert result.output.count("epoch 1/1") == 1, result.output  # rank 0 alone reports
    assert json.load(open(os.path.join(split, "config.json")))["world_size"] == 4
    checkpoint = os.path.join(split, "checkpoint.npz")

    on_one = str(tmp_path / "on-one")
    args = ["train", "--no-progress", "--batch-size", "48", "--epochs", "2"]
    assert main([*args, "--resume", checkpoint, "--out", on_one]) == 0
    assert_same_weights(weights(on_one), weights(one_process))

    on_three = str(tmp_path / "on-three")
    command = "-m minidl train --no-progress --dist sync --batch-size 16 --epochs 2".split()
    command += ["--data-dir", local, "--resume", checkpoint, "--out", on_three]
    result = c.run([1, 2], *command, timeout=240)
    assert result.returncode == 0 and not result.timed_out, result.output
    assert_same_weights(weights(on_three), weights(one_process))
    records = map(json.loads, open(os.path.join(on_three, "metrics.jsonl")))
    epochs = [r["epoch"] for r in records if r["kind"] == "epoch"]
    assert epochs == [2]  # a resumed copy records the epochs it ran


def dist_record(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "dist"]


def test_bsp_with_its_server_on_another_node_equals_one_process(cluster, one_process, tmp_path):
    """The server (rank 0) on node0, both workers on node1: 2 epochs of 2 x 24 per step.

    The parameter server's messages carry float32 (``minidl/dist/consistency/ps.py``): each
    gradient is rounded to ~6e-8 relative, which leaves ~1e-8 after 20 steps; a lost
    or repeated gradient would differ by ~1e-2."""
    out = str(tmp_path / "bsp")
    train(cluster(2), [1, 2], "--dist", "bsp", "--batch-size", "24", "--epochs", "2", "--out", out)
    assert_same_weights(weights(out), weights(one_process), tol=1e-6)
    assert [r["applied_gradients"] for r in dist_record(out)] == [20, 20]


@pytest.mark.parametrize(
    "mode, pushes, max_staleness", [("ssp:2", 20, 2), ("asp", 20, None), ("easgd:0.5:5", 4, None)]
)
def test_consistency_models_with_the_server_on_another_node(
    cluster, tmp_path, mode, pushes, max_staleness
):
    """Server on node0, workers on node1: every push crosses the link and is applied once;
    ssp:2 keeps its bound (asp and easgd have none)."""
    out = str(tmp_path / "run")
    train(cluster(2), [1, 2], "--dist", mode, "--batch-size", "24", "--epochs", "1", "--out", out)
    (record,) = dist_record(out)
    assert sum(record["per_worker"]["gradients"]) == 20  # asp: a fast worker takes more batches
    assert record["applied_gradients"] == pushes == record["staleness"]["count"]
    assert (
        record["worker_bytes_sent"] >= pushes * 4 * 61706 // 2
    )  # each push carries weights or gradients
    if max_staleness is not None:
        assert record["staleness"]["max"] <= max_staleness
