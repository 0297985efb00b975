"""No run is silently lost or wrong: reproducibility, resume, run directories, divergence, errors.

In-process runs through ``minidl_app.cli.main`` on small subsets of the real
Fashion-MNIST; the MLP keeps each run well under a second of training.
"""

import errno
import json
import os
import shutil

import numpy as np
import pytest

import minidl as md
from minidl import optim
from minidl.data import DatasetNotFoundError, FashionMNIST
from minidl.train.checkpoint import load_checkpoint, save_checkpoint
from minidl.train.run import divergence
from minidl_app import rundir as rundir_module
from minidl_app.cli import main
from minidl_app.rundir import run_status

try:
    FashionMNIST(train=False)
except DatasetNotFoundError:
    pytest.skip("Fashion-MNIST not found (make data)", allow_module_level=True)

SMALL = ["--subset", "256", "--batch-size", "32", "--no-progress"]


def train(capsys, *args):
    """``minidl train`` in process; returns (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(["train", *args])
    out, err = capsys.readouterr()
    return code, out, err


def mlp(capsys, out, *args):
    return train(capsys, "--model", "mlp", *SMALL, "--out", str(out), *args)


def weights(run):
    return load_checkpoint(os.path.join(run, "checkpoint.npz")).model_state


def epochs_recorded(run):
    return [
        r["epoch"]
        for r in map(json.loads, open(os.path.join(run, "metrics.jsonl")))
        if r["kind"] == "epoch"
    ]


def assert_same_bits(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k


# ---- reproducibility ------------------------------------------------------------------------


def test_the_same_seed_twice_gives_identical_weights_with_the_default_flags(tmp_path, capsys):
    """LeNet-5 with every default: conv algo 'auto' picks by its fixed rule, not by timing."""
    runs = []
    for name in ("a", "b"):
        code, _, err = train(capsys, *SMALL, "--epochs", "1", "--out", str(tmp_path / name))
        assert code == 0, err
        runs.append(weights(tmp_path / name))
    assert_same_bits(*runs)


@pytest.mark.parametrize("optimizer", list(optim.OPTIMIZERS))
def test_resume_is_bit_identical_for_every_optimizer(tmp_path, capsys, optimizer):
    """Two epochs straight == one epoch, then a resume for the second (schedule and state too)."""
    common = [
        "--optimizer",
        optimizer,
        "--lr",
        "0.01",
        "--lr-schedule",
        "cosine",
        "--weight-decay",
        "1e-4",
    ]
    assert mlp(capsys, tmp_path / "straight", *common, "--epochs", "2")[0] == 0
    assert mlp(capsys, tmp_path / "split", *common, "--epochs", "1")[0] == 0
    code, _, err = train(
        capsys,
        "--epochs",
        "2",
        "--no-progress",
        "--resume",
        str(tmp_path / "split" / "checkpoint.npz"),
    )
    assert code == 0, err
    assert_same_bits(weights(tmp_path / "straight"), weights(tmp_path / "split"))
    straight = load_checkpoint(str(tmp_path / "straight" / "checkpoint.npz")).optimizer_state
    split = load_checkpoint(str(tmp_path / "split" / "checkpoint.npz")).optimizer_state
    assert straight["hyper"].keys() == split["hyper"].keys()
    for key, value in straight["hyper"].items():
        assert np.array_equal(value, split["hyper"][key]), key
    assert epochs_recorded(tmp_path / "split") == [1, 2]


# ---- run directories ------------------------------------------------------------------------


def test_an_existing_run_is_never_overwritten_silently(tmp_path, capsys):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1")[0] == 0
    before = (run / "checkpoint.npz").read_bytes()
    code, _, err = mlp(capsys, run, "--epochs", "1", "--seed", "1")
    assert code == 1
    assert "already holds a run" in err and "--overwrite" in err and "--resume" in err
    assert (run / "checkpoint.npz").read_bytes() == before
    code, _, err = mlp(capsys, run, "--epochs", "1", "--seed", "1", "--overwrite")
    assert code == 0, err
    assert (run / "checkpoint.npz").read_bytes() != before
    assert epochs_recorded(run) == [1]
    assert json.load(open(run / "config.json"))["seed"] == 1


def test_resume_after_a_crash_records_each_epoch_once_and_clears_temporary_files(tmp_path, capsys):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1")[0] == 0
    shutil.copy(run / "checkpoint.npz", tmp_path / "epoch1.npz")
    assert (
        train(capsys, "--epochs", "2", "--no-progress", "--resume", str(run / "checkpoint.npz"))[0]
        == 0
    )
    first_two = (run / "checkpoint.npz").read_bytes()
    # a crash during epoch 3: its record half written, a temporary checkpoint left behind,
    # and (as if the second epoch's checkpoint had been lost) the first epoch's checkpoint
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "epoch", "epoch": 3, "train_lo')
    (run / ".checkpoint.npz.minidl-4242-x1y2z3.part").write_bytes(b"half a checkpoint")
    shutil.copy(tmp_path / "epoch1.npz", run / "checkpoint.npz")
    code, _, err = train(
        capsys, "--epochs", "2", "--no-progress", "--resume", str(run / "checkpoint.npz")
    )
    assert code == 0, err
    assert epochs_recorded(run) == [1, 2]  # epoch 2 again, once; the cut line gone
    assert not list(run.glob(".*.part"))
    assert (run / "checkpoint.npz").read_bytes() == first_two


def test_a_damaged_metrics_line_is_reported_with_its_file_and_line(tmp_path, capsys):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "2")[0] == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(["garbage{", *lines[1:]]) + "\n")
    code, _, err = train(
        capsys, "--epochs", "3", "--no-progress", "--resume", str(run / "checkpoint.npz")
    )
    assert code == 1
    assert f"{run / 'metrics.jsonl'}, line 1: not a JSON record" in err
    assert main(["report", str(run)]) == 1
    assert "line 1: not a JSON record" in capsys.readouterr().err


def test_the_checkpoint_is_written_before_the_metrics(tmp_path, capsys, monkeypatch):
    """A failure between the two leaves the epoch's weights, never a record without them."""

    def full_disk(path, *records):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rundir_module, "append_metrics", full_disk)
    run = tmp_path / "run"
    code, _, err = mlp(capsys, run, "--epochs", "1")
    assert code == 1 and "No space left on device" in err
    assert load_checkpoint(str(run / "checkpoint.npz")).meta["epoch"] == 1
    assert not (run / "metrics.jsonl").exists()


def test_a_full_disk_names_the_file_and_keeps_the_previous_checkpoint(
    tmp_path, capsys, monkeypatch
):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1")[0] == 0
    before = (run / "checkpoint.npz").read_bytes()

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np.lib.format, "write_array", no_space)
    code, _, err = train(
        capsys, "--epochs", "2", "--no-progress", "--resume", str(run / "checkpoint.npz")
    )
    assert code == 1
    assert f"could not write {run / 'checkpoint.npz'}: No space left on device" in err
    assert (run / "checkpoint.npz").read_bytes() == before
    assert not list(run.glob(".*.part"))
    assert epochs_recorded(run) == [1]


# ---- divergence -----------------------------------------------------------------------------


def test_divergence_looks_at_the_test_loss_and_every_weight():
    import minidl as md

    model = md.models.mlp()
    assert divergence({"loss": 0.5}, model) is None
    assert "test loss is nan" in divergence({"loss": float("nan")}, model)
    name, param = list(model.named_parameters())[-1]
    param.data[0] = np.inf
    assert f"weights of {name} hold NaN or inf" in divergence({"loss": 0.5}, model)


def test_a_non_finite_test_loss_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1")[0] == 0
    before = (run / "checkpoint.npz").read_bytes()
    from minidl.train import run as run_module

    monkeypatch.setattr(
        run_module,
        "evaluate",
        lambda *a, **k: {"loss": float("inf"), "acc": 0.1, "images": 10000, "confusion": None},
    )
    code, _, err = train(
        capsys, "--epochs", "2", "--no-progress", "--resume", str(run / "checkpoint.npz")
    )
    assert code == 3
    assert "epoch 2: the test loss is inf" in err and "checkpoint of epoch 1 is kept" in err
    assert (run / "checkpoint.npz").read_bytes() == before
    assert epochs_recorded(run) == [1]
    finished, line = run_status(run)  # the folder says why the run ended
    assert not finished and line.startswith(f"{run}: aborted after epoch 1 of 2: epoch 2: the")
    assert "Lower --lr, or clip gradients (--clip-grad-norm)" in line  # the command line's


@pytest.mark.parametrize("value", ["nan", "inf", "-0.1", "0", "x"])
def test_a_learning_rate_that_is_not_a_positive_number_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--lr", value])
    assert exc.value.code == 2
    assert f"argument --lr: '{value}' is not a finite number > 0" in capsys.readouterr().err


def test_a_diverged_checkpoint_is_refused_on_resume(tmp_path, capsys):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1")[0] == 0
    ckpt = load_checkpoint(str(run / "checkpoint.npz"))
    import minidl as md

    model = md.models.mlp()
    state = dict(ckpt.model_state)
    key = next(iter(state))
    state[key] = np.full_like(state[key], np.nan)
    model.load_state_dict(state)
    save_checkpoint(str(run / "checkpoint.npz"), model, None, **ckpt.meta)
    code, _, err = train(capsys, "--epochs", "2", "--resume", str(run / "checkpoint.npz"))
    assert code == 1 and f"model/{key} holds NaN or inf" in err


# ---- resume with new options ------------------------------------------------------------------


def test_resume_continues_with_the_checkpoints_options(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        mlp(
            capsys,
            run,
            "--epochs",
            "1",
            "--optimizer",
            "adam",
            "--lr",
            "0.002",
            "--batch-size",
            "64",
        )[0]
        == 0
    )
    code, out, err = train(
        capsys, "--epochs", "2", "--no-progress", "--resume", str(run / "checkpoint.npz")
    )
    assert code == 0, err and "resume:" not in out
    config = json.load(open(run / "config.json"))
    assert (config["optimizer"], config["lr"], config["batch_size"]) == ("adam", 0.002, 64)
    assert load_checkpoint(str(run / "checkpoint.npz")).optimizer_state["hyper"]["lr"] == 0.002


def test_resume_applies_new_hyper_parameters_and_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1", "--optimizer", "momentum", "--lr", "0.01")[0] == 0
    code, out, err = train(
        capsys,
        "--epochs",
        "2",
        "--no-progress",
        "--lr",
        "0.05",
        "--momentum",
        "0.5",
        "--resume",
        str(run / "checkpoint.npz"),
    )
    assert code == 0, err
    assert "resume: --lr 0.05 (the checkpoint's run used 0.01)" in out
    assert "resume: --momentum 0.5 (the checkpoint's run used 0.9)" in out
    hyper = load_checkpoint(str(run / "checkpoint.npz")).optimizer_state["hyper"]
    assert (hyper["lr"], hyper["momentum"]) == (0.05, 0.5)
    records = [json.loads(line) for line in open(run / "metrics.jsonl")]
    assert [r["lr"] for r in records if r["kind"] == "epoch"] == [0.01, 0.05]


@pytest.mark.parametrize(
    "flag, value",
    [("--seed", "3"), ("--optimizer", "adam"), ("--dataset", "mnist"), ("--dtype", "float64")],
)
def test_resume_refuses_to_change_what_defines_the_run(tmp_path, capsys, flag, value):
    run = tmp_path / "run"
    assert mlp(capsys, run, "--epochs", "1")[0] == 0
    code, _, err = train(
        capsys, "--epochs", "2", flag, value, "--resume", str(run / "checkpoint.npz")
    )
    assert code == 1
    assert f"this run asks for {value}" in err and f"leave out {flag}" in err


# ---- user errors ----------------------------------------------------------------------------


def test_user_errors_are_one_line_and_verbose_shows_the_traceback(tmp_path, capsys):
    missing = str(tmp_path / "nope.npz")
    code, _, err = train(capsys, "--resume", missing)
    assert code == 1
    assert err.startswith(f"minidl train: error: checkpoint '{missing}' does not exist")
    assert err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(FileNotFoundError, match="does not exist"):
        main(["train", "--resume", missing, "--verbose"])


def test_a_data_dir_without_the_files_is_an_error(tmp_path, capsys):
    code, _, err = train(capsys, "--data-dir", str(tmp_path), "--out", str(tmp_path / "run"))
    assert code == 1
    assert f"Fashion-MNIST (train split) not found in --data-dir {tmp_path}" in err
    assert not (tmp_path / "run").exists()


def test_files_prepared_by_hand_need_no_verify_data(tmp_path, capsys):
    from minidl.data import save_idx

    rng = np.random.default_rng(0)
    for split, n in (("train", 256), ("t10k", 64)):
        save_idx(
            tmp_path / f"{split}-images-idx3-ubyte",
            rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
        )
        save_idx(tmp_path / f"{split}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8) % 10)
    flags = ("--model", "mlp", "--epochs", "1", "--no-progress", "--data-dir", str(tmp_path))
    code, _, err = train(capsys, *flags, "--out", str(tmp_path / "refused"))
    assert code == 1 and "decodes but is not Fashion-MNIST's train-images" in err
    assert "pass --no-verify-data" in err
    code, out, err = train(capsys, *flags, "--no-verify-data", "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert "after epoch 1" in out


def test_fashion_mnist_is_never_trained_as_mnist(tmp_path, capsys):
    folder = FashionMNIST(train=False).root
    code, _, err = train(
        capsys, "--dataset", "mnist", "--data-dir", str(folder), "--out", str(tmp_path / "run")
    )
    assert code == 1 and "is Fashion-MNIST's" in err and "not MNIST's" in err


def test_the_options_typed_are_told_from_the_defaults():
    from minidl_app.cli.train import given_options

    assert given_options(
        ["--lr", "0.1", "--straggler", "1:2", "--straggler", "2:3", "--epoch", "3", "--no-progress"]
    ) == {"lr", "straggler", "epochs", "no_progress"}
    assert given_options(["--momentum", "0.9"]) == {"momentum"}  # typed, though the default
    assert given_options([]) == frozenset()


@pytest.mark.parametrize("dist", [None, "sync"])
def test_resume_restores_what_the_run_is_and_not_how_it_was_launched(dist):
    from minidl_app.cli import build_parser
    from minidl_app.cli.resume import reconcile

    argv = ["train", "--epochs", "3"] + (["--dist", dist] if dist else [])
    args = build_parser(argv).parse_args(argv)
    saved = {
        "lr": 0.05,
        "epochs": 2,
        "batch_size": 32,
        "world_size": 2,
        "compress": "topk:0.01",
        "error_feedback": "on",
        "straggler": ["1:2.0"],
        "jitter": 0.1,
        "data_dir": "/a/folder/of/another/machine",
    }
    reconcile(saved, args, given={"epochs", "dist"}, world_size=1)
    assert (args.lr, args.batch_size) == (0.05, 64)
    assert (args.straggler, args.jitter, args.data_dir) == ([], 0.0, None)
    if dist:
        assert (args.compress, args.error_feedback) == ("topk:0.01", "on")
    else:
        assert (args.compress, args.error_feedback) == ("none", "auto")


@pytest.mark.parametrize("command", ["eval", "train"])
def test_a_checkpoint_not_written_by_train_is_named_with_what_it_lacks(tmp_path, capsys, command):
    from minidl.train.checkpoint import save_checkpoint

    path = str(tmp_path / "mine.npz")
    save_checkpoint(path, md.models.mlp(num_classes=10), epoch=1)
    flag = "--checkpoint" if command == "eval" else "--resume"
    assert main([command, flag, path]) == 1
    err = capsys.readouterr().err
    assert f"checkpoint {path!r} lacks rng, config: it was not written by 'minidl train'" in err


def test_a_finite_loss_that_grew_a_million_fold_has_diverged():
    model = md.models.mlp(num_classes=10)
    assert divergence({"loss": 2.0e6}, model, first_loss=2.3) is None
    problem = divergence({"loss": 4.6e16}, model, first_loss=2.3)
    assert "4.6e+16" in problem and "first epoch's (2.3)" in problem
