"""Exercise 3: the scaled-down AlexNet (5 conv + 3 FC, LRN, dropout) on Fashion-MNIST.

    python examples/03_alexnet_small_fashion_mnist.py [--epochs 12] [--subset N] [--test-subset N]

(``--epochs 1 --subset 2000 --test-subset 1000``: a quick run of about a minute.)

AlexNet's ingredients at a size a laptop trains in minutes: overlapping
features through 3x3 convolutions, local response normalisation, dropout in
the classifier and data augmentation (random crops and flips).
Adam (lr 1e-3) with cosine annealing: the recipe of
``minidl train --model alexnet-small --workers 2 --epochs 12 --batch-size 128
--optimizer adam --lr 0.001 --lr-schedule cosine --augment``, which reached
91.0% test accuracy in 12 epochs (over 90% from epoch 9) at ~42 s per epoch
as 2 processes on 2 cores (benchmarks/RESULTS.md); this script trains in
one process, about twice as long per epoch.
"""

import argparse

import minidl as md
from minidl import optim
from minidl.data import Compose, DataLoader, FashionMNIST, RandomCrop, RandomHorizontalFlip
from minidl.train.loop import evaluate, train_epoch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--subset", type=int, default=None, help="train on the first N images")
    parser.add_argument(
        "--test-subset",
        type=int,
        default=None,
        help="measure the accuracy on the first N test images",
    )
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    md.manual_seed(0)
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    train = train.first(args.subset)
    test = test.first(args.test_subset)
    model = md.models.alexnet(num_classes=10, variant="small", in_channels=1)
    print(f"AlexNet-small: {model.num_parameters():,} parameters")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    schedule = optim.CosineAnnealingLR(opt, args.epochs)
    augment = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()])
    loader = DataLoader(train, batch_size=128, shuffle=True, seed=0, transform=augment)
    for epoch in range(1, args.epochs + 1):
        stats = train_epoch(model, opt, loader, epoch, progress=True)
        schedule.step()
        result = evaluate(model, DataLoader(test, batch_size=500), num_classes=10)
        print(
            f"epoch {epoch}: {stats['seconds']:.0f} s, train accuracy {100 * stats['acc']:.2f}%, "
            f"test accuracy {100 * result['acc']:.2f}%"
        )


if __name__ == "__main__":
    main()
