"""`minidl train` / `minidl eval` end to end on real Fashion-MNIST (small subsets).

Runs in-process through ``minidl_app.cli.main`` so that each run costs seconds.
The reliability rules (run directories, resume, divergence, errors) are
tested in test_run_reliability.py.
"""

import json
import os

import numpy as np
import pytest

import minidl as md
from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.parallel import default_num_threads
from minidl.train.checkpoint import load_checkpoint
from minidl.train.loop import NonFiniteLossError, train_epoch
from minidl_app.cli import main

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)


def train(tmp_path, name, *extra):
    out = str(tmp_path / name)
    code = main(
        [
            "train",
            "--model",
            "lenet5",
            "--subset",
            "640",
            "--batch-size",
            "32",
            "--conv-algo",
            "im2col",
            "--no-progress",
            "--out",
            out,
            *extra,
        ]
    )
    return code, out


def weights(run_dir):
    return load_checkpoint(os.path.join(run_dir, "checkpoint.npz")).model_state


def test_two_epochs_straight_equal_one_plus_resume_plus_one(tmp_path):
    code, straight = train(tmp_path, "straight", "--epochs", "2")
    assert code == 0
    code, split = train(tmp_path, "split", "--epochs", "1")
    assert code == 0
    code = main(
        [
            "train",
            "--model",
            "lenet5",
            "--subset",
            "640",
            "--batch-size",
            "32",
            "--conv-algo",
            "im2col",
            "--no-progress",
            "--epochs",
            "2",
            "--resume",
            os.path.join(split, "checkpoint.npz"),
        ]
    )
    assert code == 0
    a, b = weights(straight), weights(split)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    records = [json.loads(line) for line in open(os.path.join(split, "metrics.jsonl"))]
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]


def test_resume_with_another_model_is_refused(tmp_path, capsys):
    _, run = train(tmp_path, "run", "--epochs", "1")
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--model",
                "mlp",
                "--subset",
                "64",
                "--no-progress",
                "--epochs",
                "2",
                "--resume",
                os.path.join(run, "checkpoint.npz"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "trained with --model lenet5, this run asks for mlp" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_run_directory_holds_metrics_checkpoint_plot_and_eval_agrees(tmp_path, capsys):
    code, run = train(tmp_path, "run", "--epochs", "1")
    assert code == 0
    assert sorted(os.listdir(run)) == [
        "checkpoint.npz",
        "config.json",
        "curves.png",
        "metrics.jsonl",
    ]
    record = json.loads(open(os.path.join(run, "metrics.jsonl")).readline())
    assert record["epoch"] == 1 and 0 < record["test_acc"] <= 1
    capsys.readouterr()
    assert main(["eval", "--checkpoint", os.path.join(run, "checkpoint.npz")]) == 0
    out = capsys.readouterr().out
    assert f"test accuracy {100 * record['test_acc']:.2f}%" in out
    assert "confusion matrix" in out and "Ankle boot"[:10] in out


def test_nan_loss_stops_before_the_update_and_names_the_step():
    md.manual_seed(0)
    model = md.models.mlp()
    for p in model.parameters():
        p.data[...] = np.nan
    opt = md.optim.SGD(model.parameters(), lr=0.1)
    x = np.zeros((4, 1, 28, 28), dtype=np.float32)
    with pytest.raises(NonFiniteLossError, match="epoch 7, step 0: the loss is nan"):
        train_epoch(model, opt, [(x, np.zeros(4, dtype=np.int64))], epoch=7)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow on the way to inf is the point
def test_diverging_run_exits_nonzero_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    code, run = train(tmp_path, "run", "--epochs", "1", "--optimizer", "sgd")
    checkpoint = os.path.join(run, "checkpoint.npz")
    before = open(checkpoint, "rb").read()
    code = main(["train", "--no-progress", "--epochs", "3", "--lr", "1e30", "--resume", checkpoint])
    assert code == 3
    err = capsys.readouterr().err
    assert "the loss is" in err and "the checkpoint of epoch 1 is kept" in err
    assert open(checkpoint, "rb").read() == before
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1]
    assert records[-1]["kind"] == "aborted" and "the loss is" in records[-1]["reason"]


@pytest.mark.parametrize(
    "flag,value,choices",
    [
        ("--model", "resnet", "lenet5"),
        ("--optimizer", "lion", "adam"),
        ("--conv-algo", "magic", "winograd"),
    ],
)
def test_bad_flags_list_the_choices(flag, value, choices, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert value in err and choices in err


@pytest.mark.slow
def test_lenet_learns_from_5000_real_images(tmp_path):
    """One epoch over 5,000 images: chance is 10%; tanh + Adam with small batches
    (625 updates) reaches ~77% for seeds 0-2 (PyTorch's LeNet: 75-79%)."""
    out = str(tmp_path / "learn")
    assert (
        main(
            [
                "train",
                "--model",
                "lenet5",
                "--activation",
                "tanh",
                "--optimizer",
                "adam",
                "--lr",
                "0.001",
                "--batch-size",
                "8",
                "--subset",
                "5000",
                "--epochs",
                "1",
                "--no-progress",
                "--out",
                out,
            ]
        )
        == 0
    )
    record = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())
    assert record["test_acc"] >= 0.75


def test_workers_without_mpi_is_one_line_that_says_what_to_do(monkeypatch, capsys):
    monkeypatch.setattr(
        "minidl_app.launch.mpi_unavailable_reason",
        lambda: "mpi4py is not installed (pip install minidl[mpi])",
    )
    assert main(["train", "--workers", "2", "--epochs", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "--workers needs MPI: mpi4py is not installed" in err and "without --workers" in err


@pytest.mark.parametrize("argv", [["--lr", "abc"], ["--no-such-flag"], ["--straggler", "1:inf"]])
def test_a_bad_flag_is_one_line_and_exit_status_2(capsys, argv):
    with pytest.raises(SystemExit) as stop:
        main(["train", *argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith("minidl")
    assert "error:" in err and "--help lists the options" in err


def test_the_default_thread_count_is_timed_in_a_deterministic_run(tmp_path, capsys):
    """The default run times 1 thread against its cores and keeps the faster (the thread count
    changes no bit: the test below)."""
    if default_num_threads() < 2:
        pytest.skip("one core: nothing to choose")
    assert train(tmp_path, "timed", "--epochs", "1")[0] == 0
    timed = capsys.readouterr().out
    assert "a step took " in timed and " ms on 1, " in timed, timed


@pytest.mark.parametrize(
    "model, subset, batch",
    [("lenet5", 640, 64), ("mlp", 640, 64), ("mlp", 2048, 512), ("alexnet-small", 192, 32)],
)
def test_a_run_has_the_same_bits_on_one_thread_and_on_two(tmp_path, model, subset, batch):
    """BLAS runs on one thread and minidl's threads take pieces cut by size alone (the MLP's
    products at batch 512 are cut; AlexNet-small's convolutions chunked), so the thread count
    changes the speed of a run and never its weights. With BLAS on 2 threads, the MLP at
    batch 64 ended with other weights."""
    runs = []
    for threads in ("1", "2"):
        out = str(tmp_path / threads)
        args = ["train", "--model", model, "--subset", str(subset), "--batch-size", str(batch)]
        args += ["--epochs", "1", "--test-subset", "64", "--no-progress", "--threads", threads]
        assert main([*args, "--out", out]) == 0
        runs.append(weights(out))
    for name, value in runs[0].items():
        assert np.array_equal(value, runs[1][name]), name
