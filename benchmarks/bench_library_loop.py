"""The README's training loop as a script of one's own, against `minidl train` and PyTorch.

    python benchmarks/bench_library_loop.py [--threads 2] [--rounds 5] [--subset 60000]

Each run is a fresh process (a process-wide setting such as ``tune_malloc`` cannot
leak from one run into the next); the runs alternate, round after round:

* ``library``: the README's loop (LeNet-5, Momentum lr 0.01 mu 0.9, batch 64, shuffled);
* ``library+torch``: the same loop in a process that imported PyTorch and trained a few
  steps of its LeNet-5 first;
* ``tune_malloc``: the loop after ``md.backend.tune_malloc()``;
* ``minidl train``: the command with the same settings (its epoch seconds, from
  ``metrics.jsonl``); the command tunes malloc;
* ``PyTorch``: the same loop in PyTorch (same layers, batch, update rule).

Epoch time runs from the first batch to the last update; peak resident memory is the
process's ``ru_maxrss`` (data set and libraries included). ``--subset N`` trains on the
first N images (all runs alike) for a quicker measurement. Prints medians and the
ratios of the issue's targets.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = ("library", "library+torch", "tune_malloc", "minidl train", "PyTorch")


def readme_loop(args):
    """The README's loop, timed from the first batch to the last update."""
    import minidl as md
    from minidl import functional as F
    from minidl import optim

    md.manual_seed(0)
    model = md.models.lenet5()
    opt = optim.Momentum(model.parameters(), lr=0.01, momentum=0.9)
    data = md.data.FashionMNIST(train=True)
    if args.subset < len(data):
        data.images, data.labels = data.images[: args.subset], data.labels[: args.subset]
    loader = md.data.DataLoader(data, batch_size=64, shuffle=True)
    start = time.perf_counter(), time.process_time()
    for x, y in loader:
        loss = F.cross_entropy(model(md.Tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start[0], time.process_time() - start[1]


def torch_lenet(torch):
    """PyTorch's LeNet-5 with minidl's initial weights (``bench_lenet_epoch``, this folder:
    imported here, after PyTorch, so that PyTorch is loaded first where it runs first)."""
    from bench_lenet_epoch import torch_lenet as with_weights

    import minidl as md

    md.manual_seed(0)
    return with_weights(torch, md.models.lenet5().state_dict())


def torch_loop(args, torch):
    import minidl as md

    data = md.data.FashionMNIST(train=True)
    images = torch.from_numpy(data.images[: args.subset])
    labels = torch.from_numpy(data.labels[: args.subset].astype("int64"))
    torch.manual_seed(0)
    net = torch_lenet(torch)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    order = torch.randperm(len(labels))
    start = time.perf_counter(), time.process_time()
    for i in range(0, len(labels), 64):
        batch = order[i : i + 64]
        loss = torch.nn.functional.cross_entropy(net(images[batch]), labels[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start[0], time.process_time() - start[1]


def command_epoch(args):
    """``minidl train`` with the README loop's settings: its epoch seconds (no CPU time:
    the command does not report it)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "minidl", "train", "--model", "lenet5", "--epochs", "1"]
        cmd += ["--batch-size", "64", "--optimizer", "momentum", "--lr", "0.01"]
        cmd += ["--momentum", "0.9", "--threads", str(args.threads), "--no-progress"]
        cmd += ["--out", out] + (["--subset", str(args.subset)] if args.subset < 60000 else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f][-1]["seconds"], float("nan")


def child(args):
    """One run in this (fresh) process; prints {"seconds", "cpu_s", "rss_mib"} as JSON."""
    if args.child == "minidl train":
        seconds, cpu = command_epoch(args)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    else:
        from threadpoolctl import threadpool_limits

        torch = None
        if args.child in ("library+torch", "PyTorch"):
            import torch

            torch.set_num_threads(args.threads)
        limits = threadpool_limits(args.threads)  # noqa: F841  (BLAS and OpenMP pools)
        if args.child == "PyTorch":
            seconds, cpu = torch_loop(args, torch)
        else:
            if torch is not None:  # PyTorch has run in this process before minidl
                net = torch_lenet(torch)
                for _ in range(20):
                    net(torch.randn(64, 1, 28, 28)).sum().backward()
                time.sleep(0.5)  # its OpenMP threads stop busy-waiting
            if args.child == "tune_malloc":
                from minidl.backend import tune_malloc

                tune_malloc()
            seconds, cpu = readme_loop(args)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "cpu_s": cpu, "rss_mib": rss / 1024}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--subset", type=int, default=60000, help="training images per epoch")
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated, of " + str(RUNS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    runs = args.runs.split(",")
    results = {run: [] for run in runs}
    for _ in range(args.rounds):
        for run in runs:
            cmd = [sys.executable, __file__, "--child", run, "--threads", str(args.threads)]
            cmd += ["--subset", str(args.subset)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[run].append(json.loads(out.strip().splitlines()[-1]))
            time.sleep(1.0)
    print(
        f"LeNet-5, {args.subset} Fashion-MNIST images, batch 64, Momentum; {args.threads} "
        f"threads; medians of {args.rounds} alternating rounds, each run a fresh process"
    )
    median = {
        run: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "cpu_s", "rss_mib")}
        for run, rs in results.items()
    }
    for run, m in median.items():
        each = ", ".join(f"{r['seconds']:.2f}" for r in results[run])
        print(
            f"  {run:14s} {m['seconds']:7.2f} s  CPU {m['cpu_s']:7.2f} s  "
            f"peak RSS {m['rss_mib']:6.0f} MiB  ({each})"
        )
    ratios = [
        ("library", "minidl train", "README loop / minidl train (target <= 1.05)"),
        ("library+torch", "minidl train", "README loop after PyTorch / minidl train (<= 1.05)"),
        ("library", "tune_malloc", "README loop / the loop after tune_malloc()"),
        ("library", "PyTorch", "README loop / PyTorch (target <= 1.2, ambition 1.0)"),
    ]
    for a, b, what in ratios:
        if a in median and b in median:
            print(f"  {median[a]['seconds'] / median[b]['seconds']:.2f}  {what}")
    if "library" in median and "PyTorch" in median:
        rss = median["library"]["rss_mib"] / median["PyTorch"]["rss_mib"]
        print(f"  {rss:.2f}  peak RSS, README loop / PyTorch (target <= 1.5)")


if __name__ == "__main__":
    main()
