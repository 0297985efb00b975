"""Load Fashion-MNIST and run one epoch of the DataLoader, timing both.

    python benchmarks/bench_data_loader.py [--data-dir DIR] [--batch-size 64] [--repeats 5]

Prints medians over ``--repeats`` runs: the first (cold) load of train+test,
a reload that hits the per-process decode cache, and one shuffled epoch of
batches alone and with AlexNet-style augmentation. With PyTorch installed it
also times ``torch.utils.data.DataLoader`` over the same arrays, side by side.
"""

import argparse
import statistics
import time

from minidl.backend import tune_malloc
from minidl.data import Compose, DataLoader, FashionMNIST, Pad, RandomCrop, RandomHorizontalFlip
from minidl.data.datasets import clear_cache

tune_malloc()  # as the minidl command does: step temporaries stay in the process


def seconds(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_of(fn, repeats, before=lambda: None):
    times = []
    for _ in range(repeats):
        before()
        times.append(seconds(fn))
    return statistics.median(times)


def one_epoch(loader):
    for _ in loader:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    def load_both():
        return FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)

    cold = median_of(load_both, args.repeats, before=clear_cache)
    warm = median_of(load_both, args.repeats)
    train, _ = load_both()
    print(f"load train+test: cold {cold:.3f} s, cached decode {warm:.3f} s (from {train.root})")

    loader = DataLoader(train, args.batch_size, shuffle=True, seed=0)
    plain = median_of(lambda: one_epoch(loader), args.repeats)
    print(
        f"one epoch, batch {args.batch_size} ({len(loader)} steps): {plain:.3f} s "
        f"({plain / len(loader) * 1e6:.0f} us/step)"
    )
    augment = Compose([Pad(2), RandomCrop(32, padding=4), RandomHorizontalFlip()])
    augmented = DataLoader(train, args.batch_size, shuffle=True, seed=0, transform=augment)
    augmented_s = median_of(lambda: one_epoch(augmented), args.repeats)
    print(f"  with pad + random crop + flip: {augmented_s:.3f} s")

    try:
        import torch
    except ImportError:
        return
    dataset = torch.utils.data.TensorDataset(
        torch.from_numpy(train.images), torch.from_numpy(train.labels)
    )
    reference = torch.utils.data.DataLoader(dataset, args.batch_size, shuffle=True)
    ref = median_of(lambda: one_epoch(reference), args.repeats)
    print(f"torch DataLoader, same epoch: {ref:.3f} s; minidl/torch = {plain / ref:.3f}")


if __name__ == "__main__":
    main()
