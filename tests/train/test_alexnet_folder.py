"""AlexNet on an image folder: the variants and the paper's initialisation, top-5 and ten-crop
scoring, the plateau schedule, and `minidl train/eval --model alexnet --dataset folder`."""

import json

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl.models.alexnet import alexnet, paper_init
from minidl.optim import SGD, ReduceOnPlateau
from minidl.train.loop import average_crops, evaluate, top_k_hits
from minidl_app.cli import main
from tests.data.conftest import write_fake_dataset, write_image_folder


@pytest.mark.parametrize("variant, count", [("original", 60_965_224), ("torchvision", 61_100_840)])
def test_parameter_counts_at_the_variants_own_sizes(variant, count):
    model = alexnet(1000, variant)
    assert sum(p.data.size for p in model.parameters()) == count


def test_small_images_are_refused_with_the_smallest_size():
    with pytest.raises(ValueError, match="28x28 images are too small \\(at least 67x67\\)"):
        alexnet(10, "original", image_size=28)


@pytest.mark.parametrize("variant", ["original", "torchvision"])
def test_paper_initialisation(variant):
    md.random.manual_seed(0)
    model = paper_init(alexnet(3, variant, image_size=67))
    convs = [m for m in model.modules() if isinstance(m, L.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, L.Linear)]
    expected_bias = [0, 1, 0, 1, 1, 1, 1, 0]  # conv1..conv5, fc6, fc7, fc8
    for layer, bias in zip(convs + linears, expected_bias, strict=True):
        np.testing.assert_array_equal(layer.bias.data, bias)
    weights = np.concatenate([layer.weight.data.ravel() for layer in convs + linears])
    assert abs(weights.mean()) < 1e-5 and abs(weights.std() - 0.01) < 1e-4  # ~2e7 draws


def test_top_k_hits_against_a_full_sort():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(200, 12)), rng.integers(0, 12, 200)
    ranks = (np.argsort(-logits, axis=1) == labels[:, None]).argmax(axis=1)
    for k in (1, 5, 12, 20):
        assert top_k_hits(logits, labels, k) == int((ranks < k).sum())


def test_ten_crop_scoring_averages_the_softmax():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3 * 10, 4))
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    expected = np.log(p.reshape(3, 10, 4).mean(axis=1))
    np.testing.assert_allclose(
        average_crops(md.tensor(logits, dtype="float64"), 10).data, expected, rtol=1e-12
    )

    x, y = rng.normal(size=(3, 10, 2, 1, 1)), np.array([0, 1, 3])  # (n, crops, C, H, W)
    model = L.Sequential(L.Flatten(), L.Linear(2, 4)).to("float64")
    result = evaluate(model, [(x, y)], 4)
    with md.no_grad():
        scores = average_crops(model(md.tensor(x.reshape(30, 2, 1, 1), dtype="float64")), 10)
    assert result["acc"] == (scores.data.argmax(axis=1) == y).mean()
    np.testing.assert_allclose(result["loss"], -scores.data[np.arange(3), y].mean(), rtol=1e-12)


def test_plateau_divides_the_rate_after_two_epochs_without_a_new_best():
    opt = SGD([L.Parameter(np.zeros(1))], lr=0.01)
    schedule = ReduceOnPlateau(opt)
    rates = [schedule.step(error) for error in (0.5, 0.4, 0.4, 0.45, 0.3, 0.3, 0.3)]
    np.testing.assert_allclose(rates, [0.01, 0.01, 0.01, 1e-3, 1e-3, 1e-3, 1e-4])
    again = ReduceOnPlateau(SGD([L.Parameter(np.zeros(1))], lr=1.0))
    again.load_state_dict(schedule.state_dict())
    assert again.optimizer.lr == pytest.approx(1e-4) and again.step(0.3) == schedule.step(0.3)


@pytest.fixture
def fake_idx(tmp_path):
    write_fake_dataset(tmp_path / "idx", n_train=4, n_test=2)
    return tmp_path / "idx"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("images")
    write_image_folder(root, corrupt=False)
    return root


@pytest.mark.parametrize("variant, crop", [("original", 67), ("torchvision", 63)])
def test_train_and_eval_both_variants_from_the_cli(
    folder, tmp_path, monkeypatch, capsys, variant, crop
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run"
    args = ["train", "--recipe", "alexnet-2012", "--variant", variant, "--dataset", "folder"]
    args += ["--data-dir", str(folder), "--crop-size", str(crop), "--resize", "72"]
    args += ["--batch-size", "5", "--epochs", "1", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    config = json.loads((out / "config.json").read_text())
    recipe = {
        "model": "alexnet",
        "optimizer": "momentum",
        "momentum": 0.9,
        "init": "paper",
        "weight_decay": 5e-4,
        "lr": 0.01,
        "lr_schedule": "plateau",
    }
    assert {key: config[key] for key in recipe} == recipe
    assert config["batch_size"] == 5 and config["epochs"] == 1  # given anew: kept
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [r["train_images"] for r in epochs] == [15] and epochs[0]["test_images"] == 6
    for record in epochs:
        assert record["test_top1_error"] == pytest.approx(1 - record["test_acc"])
        assert record["test_top5_error"] == 0.0  # three classes: the label is always in the top 5
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out / "checkpoint.npz"), "--ten-crop"]) == 0
    printed = capsys.readouterr().out
    assert "over 6 images; top-1 error" in printed and "top-5 error 0.00%" in printed


def test_folder_needs_a_data_dir(capsys):
    code = main(["train", "--model", "alexnet", "--dataset", "folder", "--no-progress"])
    assert code != 0
    assert "--dataset folder needs --data-dir DIR" in capsys.readouterr().err


def test_alexnet_on_28x28_images_names_the_smallest_size(capsys, tmp_path, fake_idx):
    args = ["train", "--model", "alexnet", "--data-dir", str(fake_idx), "--no-verify-data"]
    code = main([*args, "--no-progress", "--out", str(tmp_path / "run")])
    assert code == 1
    assert "28x28 images are too small (at least 63x63)" in capsys.readouterr().err


def test_variant_is_alexnet_s_option(capsys):
    assert main(["train", "--model", "lenet5", "--variant", "original"]) != 0
    assert "--variant applies to --model alexnet only" in capsys.readouterr().err


def _torch_alexnet(nn, variant, features, classes):
    """The two networks as the paper (original) and torchvision describe them, written
    independently of minidl's builder; pooling after ReLU, LRN in PyTorch's alpha/n form."""
    relu, pool = nn.ReLU, lambda: nn.MaxPool2d(3, 2)
    if variant == "original":
        lrn = lambda: nn.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=2.0)  # noqa: E731
        body = [nn.Conv2d(3, 96, 11, 4), relu(), lrn(), pool()]
        body += [nn.Conv2d(96, 256, 5, padding=2, groups=2), relu(), lrn(), pool()]
        body += [nn.Conv2d(256, 384, 3, padding=1), relu()]
        body += [nn.Conv2d(384, 384, 3, padding=1, groups=2), relu()]
        body += [nn.Conv2d(384, 256, 3, padding=1, groups=2), relu(), pool()]
    else:
        body = [nn.Conv2d(3, 64, 11, 4, 2), relu(), pool()]
        body += [nn.Conv2d(64, 192, 5, padding=2), relu(), pool()]
        body += [nn.Conv2d(192, 384, 3, padding=1), relu()]
        body += [nn.Conv2d(384, 256, 3, padding=1), relu()]
        body += [nn.Conv2d(256, 256, 3, padding=1), relu(), pool()]
    head = [nn.Flatten(), nn.Dropout(), nn.Linear(features, 4096), relu()]
    head += [nn.Dropout(), nn.Linear(4096, 4096), relu(), nn.Linear(4096, classes)]
    return nn.Sequential(*body, *head).double()


@pytest.mark.parametrize("variant, size, side", [("original", 99, 2), ("torchvision", 95, 2)])
def test_both_variants_against_pytorch_at_a_small_size(variant, size, side):
    torch = pytest.importorskip("torch")
    md.random.manual_seed(3)
    ours = paper_init(alexnet(4, variant, image_size=size)).to("float64").eval()
    theirs = _torch_alexnet(torch.nn, variant, 256 * side * side, 4).eval()
    with torch.no_grad():
        for mine, other in zip(ours.parameters(), theirs.parameters(), strict=True):
            other.copy_(torch.from_numpy(np.array(mine.data)))
    x = np.random.default_rng(0).normal(0, 50, size=(2, 3, size, size))
    y = np.array([1, 3])
    loss = F.cross_entropy(ours(md.tensor(x, dtype="float64")), y)
    loss.backward()
    reference = torch.nn.functional.cross_entropy(theirs(torch.from_numpy(x)), torch.tensor(y))
    reference.backward()
    np.testing.assert_allclose(loss.item(), reference.item(), rtol=1e-10)
    for mine, other in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(mine.grad, other.grad.numpy(), rtol=1e-7, atol=1e-12)


def test_dropout_option_sets_the_classifier_and_is_refused_elsewhere():
    from minidl.train.config import ConfigError, TrainConfig

    x = md.tensor(np.random.default_rng(0).normal(size=(2, 3, 63, 63)), dtype="float64")
    for dropout, same in ((0.0, True), (None, False)):
        md.random.manual_seed(0)
        model = alexnet(3, "torchvision", image_size=63, dropout=dropout).to("float64")
        model.train()
        assert np.allclose(model(x).data, model(x).data, rtol=1e-10) == same  # new masks, or none
    with pytest.raises(ConfigError, match="^dropout applies to model alexnet only$"):
        TrainConfig(model="lenet5", dropout=0.2).check()
    with pytest.raises(ConfigError, match="dropout 1.0 must lie in"):
        TrainConfig(model="alexnet", dropout=1.0).check()
