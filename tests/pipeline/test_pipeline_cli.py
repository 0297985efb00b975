"""``minidl train --grid [dp=D,]pp=P --micro-batches M --schedule S``: the serial run's
checkpoint, and bad pipelines refused before any work."""

import json
import os
import pathlib

import numpy as np
import pytest

from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.dist.config import DistConfig
from minidl.dist.grid import GridShape
from minidl.train import TrainConfig
from minidl.train.checkpoint import load_checkpoint
from minidl.train.config import ConfigError
from minidl_app.cli import main
from minidl_app.launch import mpi_unavailable_reason, run_mpi

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
# 144 = 4 steps of 32 and a short one of 16 (uneven halves under dp=2 would be 8 and 8)
COMMON = ["--model", "lenet5", "--subset", "144", "--epochs", "1", "--no-progress"]
COMMON += ["--dtype", "float64", "--lr", "0.05"]


def weights(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz")).model_state


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    """One process, batches of 32: the oracle of every layout below."""
    out = str(tmp_path_factory.mktemp("serial") / "run")
    assert main(["train", *COMMON, "--batch-size", "32", "--out", out]) == 0
    return weights(out)


LAYOUTS = {
    "pp4-1f1b": (4, ["--grid", "pp=4", "--micro-batches", "4", "--schedule", "1f1b"], 32),
    "dp2-pp2-interleaved": (
        4,
        ["--grid", "dp=2,pp=2", "--micro-batches", "4", "--schedule", "interleaved"],
        16,
    ),
    "pp2-gpipe": (2, ["--grid", "pp=2", "--micro-batches", "3", "--schedule", "gpipe"], 32),
}


def minidl_train_mpi(nprocs, *args):
    """``mpiexec -n nprocs minidl train args``; asserts it succeeded, returns its output."""
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}
    args = ["-m", "minidl", "train", *args]
    result = run_mpi(nprocs, args, timeout=200, env=env | {"OPENBLAS_NUM_THREADS": "1"})
    assert not result.timed_out and result.returncode == 0, result.output
    return result.output


def train_mpi(nprocs, *args):
    """``mpiexec -n nprocs minidl train COMMON args``; asserts it finished, returns its output."""
    output = minidl_train_mpi(nprocs, *COMMON, *args)
    assert output.count("epoch 1/1") == 1, output
    return output


@pytest.mark.mpi
@pytest.mark.timeout(240)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_pipelined_run_writes_the_serial_runs_checkpoint(layout, serial_run, tmp_path):
    nprocs, flags, batch = LAYOUTS[layout]
    out = str(tmp_path / "run")
    train_mpi(nprocs, *flags, "--batch-size", str(batch), "--out", out)
    state = weights(out)
    assert list(state) == list(serial_run)
    for name, expected in serial_run.items():
        error = np.linalg.norm(state[name] - expected) / np.linalg.norm(expected)
        assert error < 1e-10, (name, error)


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_pipedream_reports_its_staleness_and_its_traced_timeline(tmp_path, capsys):
    """pp=2, M=4, 5 batches: stage 0 applies micro-batch i's gradient min(i, 1) updates
    late, stage 1 at once: per batch staleness 0 five times and 1 three times. --trace
    records batches 1-4 of both ranks; ``minidl report`` draws them."""
    out = tmp_path / "run"
    flags = ["--grid", "pp=2", "--micro-batches", "4", "--schedule", "pipedream", "--trace"]
    output = train_mpi(2, *flags, "--batch-size", "32", "--out", str(out))
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    dist = [r for r in records if r["kind"] == "dist"]
    assert len(dist) == 1 and dist[0]["updates"] == 40
    assert dist[0]["staleness"]["histogram"] == {"0": 25, "1": 15}
    assert dist[0]["stage_staleness_mean"] == [0.75, 0.0]
    assert "pipedream: 40 updates, staleness mean 0.38 max 1" in output
    assert ", balance " in output and " by memory" in output, output  # the default cut
    events = json.load(open(out / "trace.json"))["traceEvents"]
    computes = [e for e in events if e.get("cat") in ("forward", "backward")]
    assert sorted({e["args"]["step"] for e in computes}) == [1, 2, 3, 4]
    assert len(computes) == 2 * 2 * 4 * 4  # ranks x (forward, backward) x M x batches
    assert sum(e.get("cat") == "update" for e in events) == 2 * 4 * 4  # one per micro-batch
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "pipeline bubble, measured over the traced batches" in printed
    assert "the ranks' time: forward " in printed and "waiting to receive " in printed
    assert "formula (P-1)/(vM+P-1): 0.200; as scheduled with the measured stage costs" in printed
    pytest.importorskip("matplotlib")
    assert (out / "pipeline_timeline.png").stat().st_size > 0
    assert (out / "pipeline_schedule.png").stat().st_size > 0  # the schedule without stalls


REFUSED = [
    (["--grid", "pp=13"], "use pp=12 or fewer"),
    (["--grid", "pp=4", "--schedule", "interleaved", "--chunks", "4"], "--chunks 3 or fewer"),
    (["--grid", "pp=4", "--schedule", "interleaved", "--micro-batches", "6"], "not a multiple"),
    (["--grid", "pp=2", "--micro-batches", "8", "--batch-size", "4"], "cannot make 8 micro"),
    (["--micro-batches", "4"], "add pp=P to --grid"),
    (["--stages", "layers"], "--stages layers cuts a pipeline's stages: add pp=P to --grid"),
    (["--grid", "pp=2", "--clip-grad-norm", "1"], "which no pipeline stage sees"),
]


@pytest.mark.parametrize("flags, hint", REFUSED)
def test_a_pipeline_that_cannot_run_is_refused_before_any_work(flags, hint, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *COMMON, *flags, "--out", str(out)]) == 1
    assert hint in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_last_batch_too_short_for_the_interleaved_schedule_is_refused_before_training(tmp_path):
    reason = mpi_unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "run"
    flags = ["--grid", "pp=2", "--schedule", "interleaved", "--micro-batches", "2"]
    args = ["-m", "minidl", "train", *COMMON, *flags, "--subset", "129", "--out", str(out)]
    path = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}
    result = run_mpi(2, [*args, "--batch-size", "32"], timeout=100, env=env)
    assert not result.timed_out and result.returncode != 0, result.output
    assert "the last batch leaves 1 rows to a replica" in result.output, result.output
    assert not (out / "metrics.jsonl").exists()


def test_the_python_api_refuses_the_same_pipelines():
    config = TrainConfig(model="lenet5", batch_size=4)
    with pytest.raises(ConfigError, match="use pp=12 or fewer"):
        DistConfig(grid=GridShape(pp=13)).check(config)
    with pytest.raises(ConfigError, match="cannot make 8 micro-batches"):
        DistConfig(grid=GridShape(pp=2), micro_batches=8).check(config)
    with pytest.raises(ConfigError, match="does not exist; choose one of naive, gpipe"):
        DistConfig(grid=GridShape(pp=2), schedule="zigzag").check(config)
    with pytest.raises(ConfigError, match="M >= 1"):
        DistConfig(grid=GridShape(pp=2), micro_batches=0).check(config)
    options = DistConfig(grid=GridShape(dp=2, pp=2), micro_batches=4, schedule="pipedream")
    assert options.check(config).record()["schedule"] == "pipedream"


@pytest.mark.parametrize(
    "flags, hint",
    [
        (["--micro-batches", "0"], "not a positive integer"),
        (["--schedule", "zigzag"], "1f1b"),
        (["--stages", "flops"], "memory"),
    ],
)
def test_bad_pipeline_flags_are_usage_errors(flags, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", *COMMON, "--grid", "pp=2", *flags])
    assert exit_.value.code == 2
    assert hint in capsys.readouterr().err
