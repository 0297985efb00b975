"""Exercise 1: an MLP on Fashion-MNIST with the training loop written out.

    python examples/01_mlp_fashion_mnist.py [--epochs 3] [--subset N] [--data-dir DIR]

(``--epochs 1 --subset 5000``: a quick run of a few seconds.)

Every line of Algorithm 2 of Ben-Nun & Hoefler 2019 is visible: sample a minibatch,
forward, loss, backward (backpropagation), update.
"""

import argparse

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.data import DataLoader, FashionMNIST


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--subset", type=int, default=None, help="train on the first N images")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    md.manual_seed(0)
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    train = train.first(args.subset)
    model = md.models.mlp(num_classes=10)
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for x, y in DataLoader(train, batch_size=64, shuffle=True, seed=epoch):
            loss = F.cross_entropy(model(md.Tensor(x)), y)  # forward and loss
            opt.zero_grad()
            loss.backward()  # gradients of every parameter
            opt.step()  # w <- w - lr * update
        model.eval()
        correct = 0
        with md.no_grad():
            for x, y in DataLoader(test, batch_size=1000):
                correct += int((model(md.Tensor(x)).numpy().argmax(axis=1) == y).sum())
        print(
            f"epoch {epoch}: last batch loss {loss.item():.3f}, "
            f"test accuracy {100 * correct / len(test):.2f}%"
        )


if __name__ == "__main__":
    main()
