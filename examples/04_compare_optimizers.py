"""Exercise 4: the six update rules of Ben-Nun & Hoefler 2019 (Table 3) on one problem, one plot.

    python examples/04_compare_optimizers.py [--steps 600] [--test-subset N] [--out optimizers.png]

(``--steps 50 --test-subset 1000``: a quick run of about half a minute.)

Each rule trains LeNet-5 from the same initial weights on the same batches
of Fashion-MNIST; the plot shows the training loss per step (smoothed) and
the legend the final test accuracy.
"""

import argparse

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.data import DataLoader, FashionMNIST
from minidl.train.loop import evaluate

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
    md.backend.tune_malloc()  # optional: steps ~1.4x faster (see minidl/backend.py)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    test = test.first(args.test_subset)
    kernel = np.ones(25) / 25
    for name in SETTINGS:
        losses, acc = run(name, train, test, args.steps)
        print(f"{name:9s} final loss {losses[-50:].mean():.3f}  test accuracy {100 * acc:.2f}%")
        plt.plot(np.convolve(losses, kernel, mode="valid"), label=f"{name} ({100 * acc:.1f}%)")
    plt.xlabel("step")
    plt.ylabel("training loss (25-step mean)")
    plt.title(f"LeNet-5 on Fashion-MNIST, {args.steps} steps of batch 64")
    plt.legend()
    plt.savefig(args.out, dpi=100)
    print(f"plot written to {args.out}")


if __name__ == "__main__":
    main()
