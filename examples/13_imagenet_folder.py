"""Example 13: AlexNet on ImageNet (or any folder of class sub-folders), the 2012 recipe.

    python examples/13_imagenet_folder.py --data-dir /data/imagenet [--variant original]
    python examples/13_imagenet_folder.py --demo --epochs 1 --crop-size 63 --resize 72

The folder holds ``train/CLASS/*.JPEG`` (ImageNet's training archive unpacks
to one folder per synset, e.g. ``train/n01440764/``) and either
``val/CLASS/*`` or a flat ``val/`` with ``val_labels.txt`` (one
``FILE CLASS`` line per image). ImageNet's validation labels come as
``LOC_val_solution.csv`` (``ImageId,PredictionString`` whose first word is
the synset): ``--val-solution FILE`` writes ``val_labels.txt`` from it.
``--demo`` writes a small folder of generated JPEG and PNG images instead,
to see the whole run in a minute on a laptop.

The run is the paper's (Krizhevsky et al. 2012, Sec. 5): SGD with momentum
0.9, weight decay 5e-4, batch 128, lr 0.01 divided by 10 when the validation
error stops improving, their initialisation, 224x224 random crops (227 for
``--variant original``), flips and colour noise; top-1 and top-5 error in
``metrics.jsonl``. The same run from the command line, on a GPU node or
many CPU nodes::

    minidl train --recipe alexnet-2012 --variant original --dataset folder \\
        --data-dir /data/imagenet --device cuda --data-workers 8 --out runs/alexnet
    mpiexec -n 16 minidl train --recipe alexnet-2012 --dataset folder \\
        --data-dir /data/imagenet --dist sync --batch-size 8 --out runs/alexnet16
    minidl eval --checkpoint runs/alexnet/checkpoint.npz --ten-crop

(under ``mpiexec``, ``--batch-size`` is per rank: 16 x 8 = the paper's 128).
"""

import argparse
import csv
import tempfile
from pathlib import Path

import numpy as np

import minidl as md
from minidl.train import TrainConfig
from minidl.train.config import RECIPES


def write_val_labels(solution_csv, root):
    """``root/val_labels.txt`` from ImageNet's ``LOC_val_solution.csv``; returns its path."""
    target = Path(root) / "val_labels.txt"
    with open(solution_csv, newline="") as source:
        rows = [
            (row["ImageId"], row["PredictionString"].split()[0]) for row in csv.DictReader(source)
        ]
    target.write_text("".join(f"{image}.JPEG {synset}\n" for image, synset in sorted(rows)))
    return target


def write_demo_folder(root, classes=("n0001", "n0002", "n0003"), per_class=8, seed=0):
    """A small ImageNet-like folder: JPEG and PNG images of several sizes, grey and colour;
    each class has its own dominant colour, so that a few epochs learn something."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("val", per_class // 2)):
        for label, name in enumerate(classes):
            folder = Path(root) / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(count):
                height, width = rng.integers(200, 400, 2)
                pixels = rng.integers(0, 120, (height, width, 3))
                pixels[..., label % 3] += 120
                image = Image.fromarray(pixels.astype(np.uint8))
                image = image.convert("L") if k % 5 == 4 else image
                image.save(folder / f"{name}_{k}.{'JPEG' if k % 2 else 'png'}")
    return Path(root)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="the folder holding train/ and val/")
    parser.add_argument("--demo", action="store_true", help="train on a generated small folder")
    parser.add_argument("--val-solution", help="ImageNet's LOC_val_solution.csv")
    parser.add_argument("--variant", default="torchvision", choices=("original", "torchvision"))
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--crop-size", type=int, help="default: the variant's 227 or 224")
    parser.add_argument("--resize", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", help="run folder (default: a temporary one for --demo)")
    args = parser.parse_args()
    if not args.data_dir and not args.demo:
        parser.error("give --data-dir DIR (train/ and val/ in it) or --demo")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data_dir) if args.data_dir else write_demo_folder(Path(tmp) / "images")
        if args.val_solution:
            print(f"wrote {write_val_labels(args.val_solution, root)}")
        recipe = RECIPES["alexnet-2012"] | dict(epochs=args.epochs, batch_size=args.batch_size)
        config = TrainConfig(
            **recipe,
            variant=args.variant,
            dataset="folder",
            data_dir=str(root),
            crop_size=args.crop_size,
            resize=args.resize,
            device=args.device,
            out=args.out or str(Path(tmp) / "run"),
            progress=False,
        )
        result = md.train.fit(config)
        print(
            f"top-1 error {100 * (1 - result['acc']):.1f}%, top-5 error "
            f"{100 * (1 - result['top5_acc']):.1f}% on {result['images']} validation images"
        )


if __name__ == "__main__":
    main()
