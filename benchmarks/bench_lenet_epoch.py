"""One epoch of LeNet-5 on Fashion-MNIST, minidl and PyTorch CPU in the same run.

    python benchmarks/bench_lenet_epoch.py [--threads 2] [--workers 1] [--epochs 1] [--repeats 1]

Both frameworks start from the same weights and see the same batches in the
same order (batch 64, SGD with momentum 0.9, lr 0.01, Ben-Nun & Hoefler's LeNet-5
with ReLU and max pooling). Each epoch is timed from the first batch to the
last update (the data is in memory; evaluation is not timed) and followed by
a test-set evaluation, so speed and accuracy are compared together. With
``--repeats R`` the two frameworks alternate R times; medians are reported.

``--threads T``: PyTorch's intra-op threads and minidl's BLAS threads.
``--workers W`` (W > 1): minidl runs as ``minidl train --workers W`` (W
processes of one thread, each taking 64/W samples of every step: the same
updates), its epoch time read from the run's metrics.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import minidl as md
from minidl import optim
from minidl.backend import tune_malloc
from minidl.data import DataLoader, FashionMNIST
from minidl.train.loop import evaluate, train_epoch


def torch_lenet_layers(torch):
    """LeNet-5 in PyTorch with minidl's layer order (its own initialisation)."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


def torch_lenet(torch, state):
    """``torch_lenet_layers`` holding minidl's weights ``state``."""
    net = torch_lenet_layers(torch)
    net.load_state_dict({k: torch.tensor(np.array(v)) for k, v in state.items()})
    return net


def torch_epoch(torch, net, opt, loader):
    net.train()
    start = time.perf_counter()
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def torch_accuracy(torch, net, test):
    net.eval()
    with torch.no_grad():
        logits = net(torch.from_numpy(test.images))
    return float((logits.argmax(1).numpy() == test.labels).mean())


def minidl_workers_epochs(args):
    """Epoch seconds and final test accuracy of ``minidl train --workers W`` on the same work."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "minidl",
            "train",
            "--model",
            "lenet5",
            "--epochs",
            str(args.epochs),
            "--batch-size",
            "64",
            "--optimizer",
            "momentum",
            "--lr",
            "0.01",
            "--momentum",
            "0.9",
            "--seed",
            "0",
            "--conv-algo",
            args.conv_algo,
            "--workers",
            str(args.workers),
            "--no-progress",
            "--out",
            out,
        ]
        if args.data_dir:
            cmd += ["--data-dir", args.data_dir]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            records = [r for r in map(json.loads, f) if r["kind"] == "epoch"]
    return [r["seconds"] for r in records], records[-1]["test_acc"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--conv-algo", default="auto")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    tune_malloc()  # as the minidl command does: step temporaries stay in the process
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    limits = threadpool_limits(args.threads, user_api="blas")  # noqa: F841
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    ours, theirs = {"time": [], "acc": []}, {"time": [], "acc": []}
    for _ in range(args.repeats):
        md.manual_seed(0)
        model = md.models.lenet5(conv_algo=args.conv_algo)
        net = torch_lenet(torch, model.state_dict())
        opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
        topt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loader = DataLoader(train, batch_size=64, shuffle=True, seed=0)
        if args.workers > 1:
            seconds, acc = minidl_workers_epochs(args)
            ours["time"] += seconds
            ours["acc"].append(acc)
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            if args.workers == 1:
                ours["time"].append(train_epoch(model, opt, loader, epoch)["seconds"])
            time.sleep(0.5)  # the thread pool that ran last stops busy-waiting first
            loader.set_epoch(epoch)
            theirs["time"].append(torch_epoch(torch, net, topt, loader))
            time.sleep(0.5)
        if args.workers == 1:
            ours["acc"].append(evaluate(model, DataLoader(test, 1000), 10)["acc"])
        theirs["acc"].append(torch_accuracy(torch, net, test))
    m, t = statistics.median(ours["time"]), statistics.median(theirs["time"])
    how = (
        f"{args.workers} worker processes x 1 thread"
        if args.workers > 1
        else f"{args.threads} threads"
    )
    print(
        f"LeNet-5 epoch on Fashion-MNIST (60,000 images, batch 64); minidl: {how}, PyTorch: "
        f"{args.threads} threads; median of {len(ours['time'])}"
    )
    print(
        f"  minidl  {m:6.2f} s  ({60000 / m:7.0f} img/s)  test accuracy "
        f"{100 * statistics.median(ours['acc']):.2f}%  epochs: "
        + ", ".join(f"{s:.2f}" for s in ours["time"])
    )
    print(
        f"  PyTorch {t:6.2f} s  ({60000 / t:7.0f} img/s)  test accuracy "
        f"{100 * statistics.median(theirs['acc']):.2f}%  epochs: "
        + ", ".join(f"{s:.2f}" for s in theirs["time"])
    )
    print(f"  ratio minidl/PyTorch = {m / t:.2f}  (target <= 1.0)")
    if args.workers == 1:
        print(md.conv.report())


if __name__ == "__main__":
    main()
