"""A LeNet-5-like net (3x3 kernels, so Winograd applies) trained 200 steps with each algorithm.

Same initial weights, same batches, SGD with momentum: the trajectories may
only differ by float32 rounding, so every algorithm must end at the loss of
the direct convolution. Measured: the loss starts at ~2.39 and the direct
run ends at ~0.012 (mean of the last 20 steps); the other algorithms' final
means differ from it by <= 4e-4 and single steps by <= 0.04 (FFT and
Winograd F(4x4) round differently; ReLU and max-pool amplify a little).
Tolerances 1e-2 and 0.15 keep a margin and are far below what a wrong
gradient does (the loss would stay near log(10) = 2.3 or diverge).
"""

import numpy as np
import pytest

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.conv.registry import AUTO_CANDIDATES

STEPS, BATCH = 200, 32


def synthetic_images(n, seed=0):
    """Ten classes of 28x28 images: a smooth random template per class plus noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((10, 1, 7, 7))
    templates = coarse.repeat(4, axis=2).repeat(4, axis=3)
    labels = rng.integers(0, 10, n)
    images = templates[labels] + 4.0 * rng.standard_normal((n, 1, 28, 28))
    return images.astype(np.float32), labels


def lenet_like(algo):
    return L.Sequential(
        L.Conv2d(1, 6, 3, padding=1, algo=algo),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Conv2d(6, 16, 3, algo=algo),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Flatten(),
        L.Linear(16 * 6 * 6, 84),
        L.ReLU(),
        L.Linear(84, 10),
    )


def train(algo, images, labels):
    md.manual_seed(0)
    model = lenet_like(algo)
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for step in range(STEPS):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        loss = F.cross_entropy(
            model(md.tensor(images[batch])), md.tensor(labels[batch], dtype="int64")
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


@pytest.fixture(scope="module")
def data():
    return synthetic_images(STEPS * BATCH)


@pytest.fixture(scope="module")
def direct_losses(data):
    return train("direct", *data)


def test_direct_training_learns(direct_losses):
    assert direct_losses[:10].mean() > 1.5
    assert direct_losses[-20:].mean() < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("algo", [a for a in AUTO_CANDIDATES if a != "direct"] + ["auto"])
def test_every_algorithm_follows_the_same_trajectory(algo, data, direct_losses):
    """The tuned algorithms; the textbook ``*_reference`` ones are held to their tuned twins
    pass by pass in tests/reference/test_conv_reference.py (training through them takes minutes)."""
    losses = train(algo, *data)
    assert abs(losses[-20:].mean() - direct_losses[-20:].mean()) < 1e-2
    assert np.abs(losses - direct_losses).max() < 0.15, f"{algo} left the trajectory"
