"""Exercise 2: LeNet-5 on Fashion-MNIST, choosing the convolution algorithm.

    python examples/02_lenet5_fashion_mnist.py [--epochs 3]
            [--conv-algo auto|direct|im2col|fft|winograd] [--subset N]

(``--epochs 1 --subset 5000``: a quick run of a few seconds.)

The same network trains with any algorithm (Winograd needs 3x3 kernels, so
LeNet's 5x5 layers cannot use it: the error message says which can). After
training, ``md.conv.report()`` shows what the autotuner chose per layer.
"""

import argparse

import minidl as md
from minidl import optim
from minidl.data import DataLoader, FashionMNIST
from minidl.train.loop import evaluate, train_epoch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--conv-algo", default="auto")
    parser.add_argument("--subset", type=int, default=None, help="train on the first N images")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    md.manual_seed(0)
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    train = train.first(args.subset)
    model = md.models.lenet5(conv_algo=args.conv_algo)
    print(model, f"\n{model.num_parameters():,} parameters")
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(train, batch_size=64, shuffle=True, seed=0)
    for epoch in range(1, args.epochs + 1):
        stats = train_epoch(model, opt, loader, epoch, progress=True)
        result = evaluate(model, DataLoader(test, batch_size=1000), num_classes=10)
        print(
            f"epoch {epoch}: {stats['seconds']:.1f} s, {stats['images_per_s']:.0f} img/s, "
            f"test accuracy {100 * result['acc']:.2f}%"
        )
    print(md.conv.report())


if __name__ == "__main__":
    main()
