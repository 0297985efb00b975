"""Exercise 3: the scaled-down AlexNet (5 conv + 3 FC, LRN, dropout) on Fashion-MNIST.

    python examples/03_alexnet_small_fashion_mnist.py [--epochs 8]

AlexNet's ingredients at a size a laptop trains in minutes: overlapping
features through 3x3 convolutions, local response normalisation, dropout in
the classifier and data augmentation (random crops and flips).
"""
import argparse

import minidl as md
from minidl import optim
from minidl.data import Compose, DataLoader, FashionMNIST, RandomCrop, RandomHorizontalFlip
from minidl.train.loop import evaluate, train_epoch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    md.manual_seed(0)
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    model = md.models.alexnet(num_classes=10, variant="small", in_channels=1)
    print(f"AlexNet-small: {model.num_parameters():,} parameters")
    opt = optim.Momentum(model.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    schedule = optim.CosineAnnealingLR(opt, args.epochs)
    augment = Compose([RandomCrop(28, padding=2), RandomHorizontalFlip()])
    loader = DataLoader(train, batch_size=128, shuffle=True, seed=0, transform=augment)
    for epoch in range(1, args.epochs + 1):
        stats = train_epoch(model, opt, loader, epoch, progress=True)
        schedule.step()
        result = evaluate(model, DataLoader(test, batch_size=500), num_classes=10)
        print(f"epoch {epoch}: {stats['seconds']:.0f} s, train accuracy {100 * stats['acc']:.2f}%, "
              f"test accuracy {100 * result['acc']:.2f}%")


if __name__ == "__main__":
    main()
