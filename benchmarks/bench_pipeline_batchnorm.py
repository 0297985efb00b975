"""What BatchNorm per micro-batch costs in accuracy: LeNet-5 with batch normalisation after
each convolution, trained one epoch on Fashion-MNIST with batches of 64, its statistics
taken over the whole batch (one process) or over each of M micro-batches (what the
pipeline does, as GPipe does).

The pipeline's step equals one process applying the model to each micro-batch
separately and summing the losses scaled by n_m / N (``tests/pipeline``, the
``batchnorm`` check, to 1e-10), so this runs that one process, with no MPI.

Run: ``python benchmarks/bench_pipeline_batchnorm.py [--subset 12800] [--micro-batches 1 4 8]``.
"""

import argparse

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.data import DataLoader, FashionMNIST
from minidl.train.loop import evaluate


def lenet5_batchnorm():
    md.manual_seed(0)
    return L.Sequential(
        L.Conv2d(1, 6, 5, padding=2),
        L.BatchNorm2d(6),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Conv2d(6, 16, 5),
        L.BatchNorm2d(16),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Flatten(),
        L.Linear(400, 120),
        L.ReLU(),
        L.Linear(120, 84),
        L.ReLU(),
        L.Linear(84, 10),
    )


def train(micro_batches, train_set, test_set, batch_size):
    model = lenet5_batchnorm()
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for x, y in DataLoader(train_set, batch_size, shuffle=True, seed=0):
        opt.zero_grad()
        for xm, ym in zip(np.array_split(x, micro_batches), np.array_split(y, micro_batches)):
            (F.cross_entropy(model(md.Tensor(xm)), ym) * (len(ym) / len(y))).backward()
        opt.step()
    return evaluate(model, DataLoader(test_set, 1000), 10)["acc"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=12800)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    train_set = FashionMNIST(train=True).first(args.subset)
    test_set = FashionMNIST(train=False)
    print("| micro-batches M | rows per BatchNorm statistic | test accuracy |\n|---|---|---|")
    for m in args.micro_batches:
        accuracy = train(m, train_set, test_set, args.batch_size)
        print(f"| {m} | {args.batch_size // m} | {100 * accuracy:.2f}% |", flush=True)


if __name__ == "__main__":
    main()
