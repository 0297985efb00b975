"""`mpiexec -n 2 minidl train --dist sync --sync-bn`: the checkpoint of one process with twice
the batch (ResNet-20's batch norms, float64); without --sync-bn each rank normalises with its
own share, and the run differs; refusals in one line."""

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

COMMON = ["--subset", "32", "--test-subset", "16", "--no-progress", "--epochs", "1"]
RESNET = ["--model", "resnet20", "--dtype", "float64", *COMMON]


def train(mpi_run, nprocs, out, *flags):
    args = ["-m", "minidl", "train", *RESNET, "--out", str(out), *flags]
    result = mpi_run(nprocs, *args, timeout=120)
    assert not result.timed_out and result.returncode == 0, result.output
    return load_checkpoint(os.path.join(out, "checkpoint.npz"))


def largest_difference(a, b):
    return max(float(np.abs(np.asarray(a[k]) - np.asarray(b[k])).max()) for k in b)


def test_sync_bn_on_two_ranks_gives_the_checkpoint_of_one_process_with_twice_the_batch(
    mpi_run, tmp_path
):
    """4 steps of 2 x 8 against 1 x 16: weights, running statistics and momentum to 1e-10,
    under plain sync, under --zero 3 (which gathers each layer's weights inside the blocks'
    forwards; the batch norms' collectives run between, in the same order on every rank) and
    under --recompute (the recomputed forward joins the statistics again, updating nothing).
    Without --sync-bn the ranks' running statistics are of 8 samples each (the docs'
    per-rank statistics), which moves them away from one process's. A resume with --dist
    restores --sync-bn (DIST_ONLY)."""
    one = train(mpi_run, 1, tmp_path / "one", "--batch-size", "16")
    synced = ["--dist", "sync", "--sync-bn", "--batch-size", "8"]
    for index, extra in enumerate(([], ["--zero", "3"], ["--recompute", "3"])):
        got = train(mpi_run, 2, tmp_path / f"synced{index}", *synced, *extra)
        assert largest_difference(got.model_state, one.model_state) <= 1e-10, extra
        mine, theirs = got.optimizer_state["state"], one.optimizer_state["state"]
        assert len(mine) == len(theirs) > 0
        for a, b in zip(mine, theirs, strict=True):
            assert largest_difference(a, b) <= 1e-10, extra
    apart = train(mpi_run, 2, tmp_path / "apart", "--dist", "sync", "--batch-size", "8")
    running = {k: v for k, v in one.model_state.items() if "running" in k}
    assert running and largest_difference(apart.model_state, running) > 1e-6
    saved, again = str(tmp_path / "synced0" / "checkpoint.npz"), str(tmp_path / "again")
    resume = ["--resume", saved, "--epochs", "2", "--no-progress", "--test-subset", "16"]
    result = mpi_run(2, "-m", "minidl", "train", *resume, "--dist", "sync", "--out", again)
    assert not result.timed_out and result.returncode == 0, result.output
    with open(os.path.join(again, "config.json")) as f:
        assert json.load(f)["sync_bn"] is True


def test_sync_bn_where_it_cannot_run_is_refused_in_one_line(mpi_run, tmp_path):
    """Under mpiexec: one replica (spatial=2: dp=1), a model without batch norm, and a last
    batch that leaves a rank empty."""
    for flags, hint in (
        (["--model", "lenet5", "--grid", "spatial=2"], "this run has one (dp=1)"),
        (["--model", "lenet5"], "the model has no BatchNorm1d/2d layer"),
        (["--model", "resnet20", "--subset", "33"], "the last batch of 1 samples"),
    ):
        args = ["-m", "minidl", "train", *COMMON, "--batch-size", "8", *flags]
        args += [
            "--dist",
            "sync",
            "--sync-bn",
            "--out",
            str(tmp_path / "-".join(flags).replace("=", "")),
        ]
        result = mpi_run(2, *args, timeout=60)
        assert result.returncode != 0 and hint in result.output, result.output


@pytest.mark.parametrize(
    "flags, hint",
    [
        (["--sync-bn"], "start it under mpiexec with --dist sync"),
        (["--dist", "ssp:1", "--sync-bn"], "trains replicas apart"),
        (["--grid", "pp=2", "--sync-bn"], "micro-batches normalise separately"),
        (["--grid", "dp=2,tp=2", "--sync-bn"], "tensor-parallel layers split channels"),
    ],
)
def test_sync_bn_where_it_means_nothing_is_refused_in_one_line(flags, hint, capsys):
    assert main(["train", "--model", "lenet5", *COMMON, *flags]) == 1
    err = capsys.readouterr().err
    assert hint in err and err.count("\n") == 1, err
