"""Can the image-folder loader feed AlexNet? Decode-and-augment throughput against the step time.

    python benchmarks/bench_loader.py [--images 64] [--batch 16] [--rounds 5] [--threads 2]

Writes ``--images`` JPEGs of ImageNet's typical size (500x375, quality 90,
smooth colour fields with edges and mild noise, so that they compress like
photographs) into a temporary ``train/`` folder, then alternates, round by
round:

- minidl's ``DataLoader`` over ``ImageFolder`` (the paper's training
  preparation: resize to 256, random 224 crop, flip, mean, colour noise) with
  1 and 2 worker threads, images/s;
- the same decode, resize and crop in a plain loop (Pillow and NumPy, one
  thread, no loader): the reference for what one worker can do;
- one AlexNet training step (forward, backward, momentum update; batch
  ``--batch``, 224x224, the torchvision variant; 227x227 for the original)
  in minidl, images/s.

Prints medians and the ratios: loader images/s over reference images/s, and
loader images/s over the step's images/s (>= 1: the loader keeps up).
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.data import DataLoader, ImageFolder
from minidl.data.imageprep import load_patch
from minidl.models.alexnet import IMAGE_SIZE


def write_jpegs(root, count, seed=0):
    """``count`` photograph-like 500x375 JPEGs in ``root/train/c0..c3``."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = root / "train" / f"c{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        y, x = np.mgrid[0:375, 0:500]
        slopes = rng.uniform(-0.3, 0.3, (3, 2))  # a colour gradient per channel
        base = rng.uniform(0, 255, 3) + np.einsum("ck,kyx->yxc", slopes, np.stack([x, y]))
        pixels = np.clip(base + rng.normal(0, 6, (375, 500, 3)), 0, 255)
        image = Image.fromarray(pixels.astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            box = sorted(rng.integers(0, 500, 2)) + sorted(rng.integers(0, 375, 2))
            fill = tuple(int(v) for v in rng.integers(0, 256, 3))
            draw.ellipse((box[0], box[2], box[1], box[3]), fill=fill)
        image.filter(ImageFilter.GaussianBlur(1)).save(folder / f"img{i}.JPEG", quality=90)


def loader_rate(dataset, batch, workers, epoch):
    loader = DataLoader(dataset, batch, shuffle=True, workers=workers, prefetch=2)
    loader.set_epoch(epoch)
    start = time.perf_counter()
    count = sum(len(y) for _, y in loader)
    return count / (time.perf_counter() - start)


def plain_rate(paths, crop=224):
    """Decode, resize and crop in one thread, no loader: the reference."""
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for path in paths:
        patch = load_patch(path)
        top, left = rng.integers(0, 256 - crop + 1, 2)
        np.ascontiguousarray(
            patch[top : top + crop, left : left + crop].transpose(2, 0, 1), dtype=np.float32
        )
    return len(paths) / (time.perf_counter() - start)


def step_rate(variant, batch):
    """Images/s of AlexNet training steps (the paper's optimizer) at ``batch``."""
    md.manual_seed(0)
    model = md.models.alexnet(1000, variant)
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    size = IMAGE_SIZE[variant]
    x = md.tensor(np.random.default_rng(0).normal(size=(batch, 3, size, size)).astype("float32"))
    y = np.arange(batch) % 1000

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # warm-up: buffers, and the autotuner's choices
    start = time.perf_counter()
    step()
    return batch / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="BLAS threads of the step")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    limits = threadpool_limits(args.threads, user_api="blas")  # noqa: F841
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_jpegs(root, args.images)
        dataset = ImageFolder(root, train=True)  # measures and caches the colour statistics
        rates = {"loader, 1 worker": [], "loader, 2 workers": [], "plain loop, 1 thread": []}
        steps = {"original": [], "torchvision": []}
        for epoch in range(args.rounds):
            time.sleep(0.3)
            rates["plain loop, 1 thread"].append(plain_rate(dataset.samples))
            for workers in (1, 2):
                time.sleep(0.3)
                rates[f"loader, {workers} worker" + "s" * (workers > 1)].append(
                    loader_rate(dataset, args.batch, workers, epoch)
                )
            for variant in steps:
                time.sleep(0.3)
                steps[variant].append(step_rate(variant, args.batch))
    medians = {name: statistics.median(values) for name, values in {**rates, **steps}.items()}
    print(
        f"{args.images} JPEGs 500x375, batch {args.batch}, {args.rounds} rounds (medians); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for name in rates:
        print(f"  {name:24s} {medians[name]:8.1f} images/s")
    for variant in steps:
        print(f"  AlexNet {variant:16s} {medians[variant]:8.1f} images/s (training step)")
    plain = medians["plain loop, 1 thread"]
    for workers in ("loader, 1 worker", "loader, 2 workers"):
        ratio = medians[workers] / plain
        keeps = ", ".join(f"{medians[workers] / medians[v]:.2f}x {v}'s step" for v in steps)
        print(f"  {workers}: {ratio:.2f}x the plain loop; {keeps}")


if __name__ == "__main__":
    main()
