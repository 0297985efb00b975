"""The README's training loop as a script of one's own, against `minidl train` and PyTorch.

    python benchmarks/bench_library_loop.py [--threads 2] [--rounds 5] [--subset 60000]
    python benchmarks/bench_library_loop.py --conv [--threads 2] [--rounds 5]
    python benchmarks/bench_library_loop.py --memory-epochs 5 [--subset 60000]

``--threads T`` sets BLAS's threads, PyTorch's and minidl's own
(``md.backend.set_num_threads``). Each run is a fresh process (a process-wide setting
such as ``tune_malloc`` cannot leak from one run into the next); the runs alternate,
round after round:

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

``--conv``: the issue's single conv layers, forward+backward, with minidl's buffer pool
alone against the same after ``tune_malloc()`` (each a fresh process), with the page
faults per call: what the pool is there to remove.
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
CONV_RUNS = ("conv", "conv+tune_malloc")
CONV_LAYERS = {  # name: input, weight, stride, padding, algo (the table)
    "3x3 64->64 56x56 b16": ((16, 64, 56, 56), (64, 64, 3, 3), 1, 1, "winograd"),
    "AlexNet conv1 11x11/4 b16": ((16, 3, 224, 224), (64, 3, 11, 11), 4, 2, "auto"),
    "AlexNet conv3 3x3 192->384 b16": ((16, 192, 13, 13), (384, 192, 3, 3), 1, 1, "auto"),
    "LeNet conv1 b64": ((64, 1, 28, 28), (6, 1, 5, 5), 1, 2, "auto"),
    "LeNet conv2 b64": ((64, 6, 14, 14), (16, 6, 5, 5), 1, 0, "auto"),
}


def readme_loop(args, epochs=1):
    """The README's loop, timed from the first batch to the last update: (wall, CPU) seconds
    of the last epoch; with ``epochs`` > 1, prints each epoch's time, resident memory and
    buffer-pool bytes."""
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
    for epoch in range(epochs):
        start = time.perf_counter(), time.process_time()
        for x, y in loader:
            loss = F.cross_entropy(model(md.Tensor(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - start[0], time.process_time() - start[1]
        if epochs > 1:
            pool = md.backend.pool_stats()
            print(
                f"  epoch {epoch}: {seconds[0]:6.2f} s, resident {resident_mib():6.1f} MiB, "
                f"pool free {pool['free_bytes'] / 2**20:5.1f} MiB, leased "
                f"{pool['leased_bytes'] / 2**20:5.1f} MiB, misses {pool['misses']}"
            )
    return seconds


def resident_mib():
    """This process's resident memory now (Linux: /proc/self/statm), in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


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


def conv_layers(repeats=10):
    """{layer: {"ms", "cpu_ms", "faults"}}: median forward+backward wall and CPU time of each
    layer, and its page faults per call, after three warm-up calls."""
    import numpy as np

    import minidl as md
    from minidl import functional as F

    rng, results = np.random.default_rng(0), {}
    for name, (x_shape, w_shape, stride, padding, algo) in CONV_LAYERS.items():
        x = md.tensor(rng.standard_normal(x_shape).astype(np.float32), requires_grad=True)
        w = md.tensor(0.1 * rng.standard_normal(w_shape).astype(np.float32), requires_grad=True)

        def call():
            y = F.conv2d(x, w, stride=stride, padding=padding, algo=algo)
            y.backward(np.ones(y.shape, np.float32))
            x.grad = w.grad = None

        for _ in range(3):
            call()
        walls, cpus, faults = [], [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(repeats):
            start = time.perf_counter(), time.process_time()
            call()
            walls.append(time.perf_counter() - start[0])
            cpus.append(time.process_time() - start[1])
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / repeats
        results[name] = {
            "ms": 1e3 * statistics.median(walls),
            "cpu_ms": 1e3 * statistics.median(cpus),
            "faults": faults,
        }
    return results


def child(args):
    """One run in this (fresh) process; prints {"seconds", "cpu_s", "rss_mib"} as JSON
    (for the conv runs, ``conv_layers``' results)."""
    if args.child in CONV_RUNS:
        from threadpoolctl import threadpool_limits

        import minidl  # (NumPy's and SciPy's BLAS loaded: the limit reaches them)

        limits = threadpool_limits(args.threads)  # noqa: F841
        minidl.backend.set_num_threads(args.threads)  # minidl's own chunk threads
        if args.child == "conv+tune_malloc":
            from minidl.backend import tune_malloc

            tune_malloc()
        return print(json.dumps(conv_layers()))
    if args.child == "minidl train":
        seconds, cpu = command_epoch(args)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    else:
        from threadpoolctl import threadpool_limits

        torch = None
        if args.child in ("library+torch", "PyTorch"):
            import torch

            torch.set_num_threads(args.threads)
        import minidl  # (NumPy's and SciPy's BLAS loaded: the limit reaches them)

        limits = threadpool_limits(args.threads)  # noqa: F841  (BLAS and OpenMP pools)
        minidl.backend.set_num_threads(args.threads)  # minidl's own chunk threads
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
    parser.add_argument("--conv", action="store_true", help="single conv layers instead")
    parser.add_argument(
        "--memory-epochs",
        type=int,
        help="instead: this many epochs of the README loop in "
        "this process, with the resident memory after each",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.memory_epochs:
        print(f"README loop, {args.subset} images an epoch, {args.threads} threads:")
        from threadpoolctl import threadpool_limits

        import minidl  # (NumPy's and SciPy's BLAS loaded: the limit reaches them)

        minidl.backend.set_num_threads(args.threads)  # minidl's own chunk threads
        with threadpool_limits(args.threads):
            return readme_loop(args, args.memory_epochs)
    runs = list(CONV_RUNS) if args.conv else args.runs.split(",")
    results = {run: [] for run in runs}
    for _ in range(args.rounds):
        for run in runs:
            cmd = [sys.executable, __file__, "--child", run, "--threads", str(args.threads)]
            cmd += ["--subset", str(args.subset)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[run].append(json.loads(out.strip().splitlines()[-1]))
            time.sleep(1.0)
    if args.conv:
        return print_conv(results, args)
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


def print_conv(results, args):
    print(
        f"conv2d forward+backward, {args.threads} threads; medians over {args.rounds} "
        "alternating fresh processes of each process's median of 10 calls"
    )
    print("  layer                            ms (CPU ms, faults/call)  tune_malloc()   ratio")
    for layer in CONV_LAYERS:
        pool, tuned = (
            {k: statistics.median(r[layer][k] for r in results[run]) for k in ("ms", "cpu_ms")}
            | {"faults": statistics.median(r[layer]["faults"] for r in results[run])}
            for run in CONV_RUNS
        )
        print(
            f"  {layer:30s} {pool['ms']:7.1f} ({pool['cpu_ms']:6.1f}, {pool['faults']:5.0f})"
            f"  {tuned['ms']:7.1f} ({tuned['cpu_ms']:6.1f}, {tuned['faults']:5.0f})"
            f"  {pool['ms'] / tuned['ms']:5.2f} (target <= 1.05)"
        )


if __name__ == "__main__":
    main()
