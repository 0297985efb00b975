"""Exercise 4: the six update rules of Ben-Nun & Hoefler 2019 (Table 3) on one problem, one plot.

    python examples/04_compare_optimizers.py [--steps 600] [--test-subset N] [--out optimizers.png]

(``--steps 50 --test-subset 1000``: a quick run of about half a minute.)

Each rule trains LeNet-5 from the same initial weights on the same batches
of Fashion-MNIST; the plot shows the training loss, each point the mean of
the WINDOW steps that end at that step (so the curves start at step WINDOW,
not at 0), and the legend each rule's accuracy on the test images after the
last step.
"""

import argparse

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.data import DataLoader, FashionMNIST
from minidl.train.loop import evaluate

WINDOW = 25  # steps per point of the smoothed loss curves

SETTINGS = {
    "sgd": dict(lr=0.05),
    "momentum": dict(lr=0.01, momentum=0.9),
    "nesterov": dict(lr=0.01, momentum=0.9),
    "adagrad": dict(lr=0.02),
    "rmsprop": dict(lr=0.001),
    "adam": dict(lr=0.001),
}


def run(name, train, test, steps):
    md.manual_seed(0)
    model = md.models.lenet5()
    opt = optim.OPTIMIZERS[name](model.parameters(), **SETTINGS[name])
    losses = []
    batches = iter(DataLoader(train, batch_size=64, shuffle=True, seed=0))
    for _ in range(steps):
        x, y = next(batches)
        loss = F.cross_entropy(model(md.Tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    acc = evaluate(model, DataLoader(test, batch_size=1000), num_classes=10)["acc"]
    return np.array(losses), acc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument(
        "--test-subset",
        type=int,
        default=None,
        help="measure the accuracy on the first N test images",
    )
    parser.add_argument("--out", default="optimizers.png")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    test = test.first(args.test_subset)
    curves = {}
    for name in SETTINGS:
        losses, acc = run(name, train, test, args.steps)
        print(f"{name:9s} final loss {losses[-50:].mean():.3f}  test accuracy {100 * acc:.2f}%")
        curves[name] = losses, acc
    plot(curves, len(test), args.out)
    print(f"plot written to {args.out}")


def plot(curves, test_images, path):
    """The loss curves ({rule: (losses per step, test accuracy)}); returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    steps = len(next(iter(curves.values()))[0])
    window = min(WINDOW, steps)
    for name, (losses, acc) in curves.items():
        mean = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(window, steps + 1), mean, label=f"{name}: {100 * acc:.1f}%")
    ax.set_xlabel("training step (batches of 64 images)")
    ax.set_ylabel(f"training loss (mean of the {window} steps ending here)")
    ax.set_title(f"LeNet-5 on Fashion-MNIST, {steps} steps of batch 64")
    ax.legend(title=f"test accuracy ({test_images} images)", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return fig


if __name__ == "__main__":
    main()
