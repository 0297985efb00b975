"""Checkpoints: exact round trip, atomic replacement, and clear errors for bad files."""

import os

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def trained_pair():
    md.manual_seed(0)
    model = L.Sequential(L.Linear(6, 8), L.BatchNorm1d(8), L.ReLU(), L.Linear(8, 3))
    opt = optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.99))
    x = md.tensor(np.random.default_rng(0).standard_normal((16, 6)))
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(x), np.arange(16) % 3).backward()
        opt.step()
    return model, opt


def test_round_trip_restores_model_optimizer_and_metadata(tmp_path):
    model, opt = trained_pair()
    path = save_checkpoint(
        str(tmp_path / "ckpt.npz"), model, opt, epoch=3, note="hi", rng=md.random.get_state()
    )
    ckpt = load_checkpoint(path)
    md.manual_seed(99)
    fresh = L.Sequential(L.Linear(6, 8), L.BatchNorm1d(8), L.ReLU(), L.Linear(8, 3))
    fresh.load_state_dict(ckpt.model_state)
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=k)
    fresh_opt = optim.Adam(fresh.parameters())
    fresh_opt.load_state_dict(ckpt.optimizer_state)
    assert fresh_opt.betas == (0.8, 0.99) and fresh_opt.lr == 0.01
    for s, t in zip(opt.state, fresh_opt.state):
        assert s["step"] == t["step"] == 3
        np.testing.assert_array_equal(s["exp_avg_sq"], t["exp_avg_sq"])
    assert ckpt.meta["epoch"] == 3 and ckpt.meta["note"] == "hi"


def test_checkpoint_loads_without_pickle(tmp_path):
    model, opt = trained_pair()
    path = save_checkpoint(str(tmp_path / "c.npz"), model, opt, epoch=1)
    with np.load(path, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, opt = trained_pair()
    path = str(tmp_path / "ckpt.npz")
    save_checkpoint(path, model, opt, epoch=1)
    before = open(path, "rb").read()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, opt, epoch=2)
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary file left behind


def test_missing_and_corrupt_files_get_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(str(tmp_path / "nope.npz"))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(str(bad))
    model, opt = trained_pair()
    good = save_checkpoint(str(tmp_path / "good.npz"), model, opt, epoch=1)
    data = open(good, "rb").read()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cut.npz"):
        load_checkpoint(str(tmp_path / "cut.npz"))


@pytest.mark.parametrize(
    "key, saved, asked", [("variant", "original", "torchvision"), ("crop_size", 224, 160)]
)
def test_a_checkpoint_of_another_variant_or_crop_is_refused_up_front(key, saved, asked):
    """They give AlexNet its shapes: refused before the model is built, naming both values."""
    from minidl_app.resume import ResumeError, check_fixed

    with pytest.raises(ResumeError) as error:
        check_fixed({key: saved}, {key: asked})
    message = str(error.value)
    assert f"trained with {key} {saved}, this run asks for {asked}" in message, message
    check_fixed({key: saved}, {key: saved})  # the same value continues the run
