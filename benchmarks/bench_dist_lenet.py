"""LeNet-5 epoch with synchronous data parallelism: minidl on 1 and 2 MPI ranks, PyTorch DDP on 2.

    python benchmarks/bench_dist_lenet.py [--repeats 3]

Same work everywhere: one epoch of Fashion-MNIST, batch 64 per rank, SGD
with momentum 0.9 and lr 0.01, one BLAS/intra-op thread per rank.

- minidl, 1 rank: ``minidl train --threads 1``;
- minidl, 2 ranks: ``mpiexec -n 2 minidl train --dist sync`` (global batch 128);
- PyTorch: ``DistributedDataParallel`` over gloo, 2 processes, each on its
  shard (the same sharding as minidl's loader), ``torch.set_num_threads(1)``.

Each side's epoch time is its training loop's own (for 2 ranks, the slower
rank's); the runs alternate ``--repeats`` times and medians are printed, with
the two targets: 2-rank throughput >= 1.7x 1-rank, and faster than DDP.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

COMMON = [
    "--model",
    "lenet5",
    "--epochs",
    "1",
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
    "--no-progress",
]


def minidl_epoch(ranks):
    """Seconds of one training epoch of ``minidl train`` on ``ranks`` processes."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "minidl", "train", *COMMON, "--threads", "1", "--out", out]
        if ranks > 1:
            from minidl_app.launch import mpiexec_path

            cmd = [mpiexec_path(), "-n", str(ranks)] + cmd + ["--dist", "sync"]
        subprocess.run(
            cmd,
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return json.loads(f.readline())["seconds"]


def ddp_worker(rank, size, port, results):
    """One DDP rank: its shard of every global batch, then the epoch time."""
    import torch
    import torch.distributed as tdist
    from bench_lenet_epoch import torch_lenet_layers

    from minidl.data import DataLoader, FashionMNIST

    torch.set_num_threads(1)
    tdist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
    )
    torch.manual_seed(0)
    net = torch_lenet_layers(torch)
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(
        FashionMNIST(train=True), 64, shuffle=True, seed=0, rank=rank, world_size=size
    )
    tdist.barrier()
    start = time.perf_counter()
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    times = [None] * size
    tdist.all_gather_object(times, seconds)
    if rank == 0:
        results.put(max(times))
    tdist.destroy_process_group()


def ddp_epoch(size=2):
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=ddp_worker, args=(r, size, port, results)) for r in range(size)]
    for p in procs:
        p.start()
    seconds = results.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    one, two, ddp = [], [], []
    for _ in range(args.repeats):
        one.append(minidl_epoch(1))
        two.append(minidl_epoch(2))
        ddp.append(ddp_epoch(2))
    m1, m2, d = (statistics.median(v) for v in (one, two, ddp))
    show = lambda v: ", ".join(f"{s:.2f}" for s in v)  # noqa: E731
    print(
        f"LeNet-5, one epoch of Fashion-MNIST, batch 64 per rank, 1 thread per rank, "
        f"median of {args.repeats}"
    )
    print(f"  minidl 1 rank    {m1:6.2f} s  {60000 / m1:7.0f} img/s   runs: {show(one)}")
    print(f"  minidl 2 ranks   {m2:6.2f} s  {60000 / m2:7.0f} img/s   runs: {show(two)}")
    print(f"  PyTorch DDP x2   {d:6.2f} s  {60000 / d:7.0f} img/s   runs: {show(ddp)}")
    print(f"  2-rank speedup over 1 rank = {m1 / m2:.2f}  (target >= 1.7)")
    print(f"  minidl 2 ranks / PyTorch DDP = {m2 / d:.2f}  (target < 1.0)")


if __name__ == "__main__":
    main()
