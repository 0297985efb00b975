"""One model, every layout: data, tensor, spatial, hybrid and Krizhevsky's one weird trick.

    mpiexec -n 4 python examples/14_model_parallel_layouts.py [--steps 20] [--plot layouts.png]
    mpiexec -n 2 python examples/14_model_parallel_layouts.py --steps 5   # a quick run

LeNet-5 trains the same steps of Fashion-MNIST (global batch 64, float64, SGD
momentum) under each layout the job's ranks allow:

- ``dp=N``: data parallelism, each rank a share of the batch, gradients averaged;
- ``tp=N``: tensor parallelism, each layer's weights split (``md.dist.tensor``);
- ``spatial=N``: each rank a block of every image's rows (``md.dist.spatial``);
- ``dp=2,tp=N/2``: hybrid, replicas of a split model;
- ``one weird trick``: convolutions data-parallel, fully connected layers split.

It prints, per layout, the time and the bytes per step (counted, and predicted
by ``minidl.perf.tensor_volume`` and ``minidl.dist.spatial.step_bytes``), and how
far its weights are from one process training on the whole batch: every layout
trains the same model (to rounding), and what differs is who holds what and
what travels. ``--plot`` draws bytes and time per step (needs matplotlib).
"""

import argparse
import time

import numpy as np

import minidl as md
from minidl import dist, optim
from minidl import functional as F
from minidl.dist import spatial, tensor
from minidl.perf.tensor_volume import gradient_bytes, tensor_volume

BATCH = 64


def lenet():
    md.manual_seed(0)
    return md.models.lenet5(conv_algo="im2col").to("float64")


def layouts(size):
    """(name, grid extents, plan) of every layout ``size`` ranks allow."""
    found = [("data", {"dp": size}, None)]
    if size > 1:
        found += [
            ("tensor", {"tp": size}, tensor.plan),
            ("spatial", {"spatial": size}, None),
            ("one weird trick", {"tp": size}, tensor.one_weird_trick_plan),
        ]
    if size >= 4 and size % 2 == 0:
        found.append(("hybrid", {"dp": 2, "tp": size // 2}, tensor.plan))
    return found


def train(comm, extents, plan, data):
    """The serial model after the steps, seconds per step, bytes this rank sent per step."""
    grid = dist.Grid(comm, **extents)
    serial = lenet()
    dp, tp_size = grid.group("dp"), extents.get("tp", 1)
    if tp_size > 1:
        parallel = tensor.TensorParallel(serial, grid.group("tp"), plan(serial))
        model = parallel.module
    elif extents.get("spatial", 1) > 1:
        rows = grid.group("spatial")
        model = spatial.spatial_parallel(serial, rows, 28)
    else:
        model = serial
    opt = optim.Momentum(model.parameters(), lr=0.05, momentum=0.9)
    if dp.size > 1:
        opt = dist.DistributedOptimizer(opt, dp)
    share = tensor.Split(BATCH, dp.size).slice(dp.rank)
    tensor.TRAFFIC.clear()
    comm.barrier()
    start = time.perf_counter()
    for x, y in data:
        x = x[share]
        if extents.get("spatial", 1) > 1:
            x = spatial.local_rows(x, rows)
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y[share]).backward()
        opt.step()
    seconds = max(comm.allgather_object(time.perf_counter() - start)) / len(data)
    if tp_size > 1:
        parallel.gather(serial)
    counters = getattr(model, "counters", {})  # the spatial layers' own
    sent = sum(tensor.TRAFFIC.values()) + sum(v for k, v in counters.items() if "bytes" in k)
    sent += opt.stats["bytes_reduced"] if dp.size > 1 else 0
    return serial, seconds, sum(comm.allgather_object(sent)) / len(data)


def predicted(extents, plan, size):
    """Bytes per step summed over the ranks, from the formulas."""
    serial, dp, tp_size = lenet(), extents.get("dp", 1), extents.get("tp", 1)
    if "spatial" in extents:
        return sum(spatial.step_bytes(serial, (BATCH, 1, 28, 28), size, itemsize=8).values())
    words = plan(serial) if plan else [""] * len(list(serial.named_modules())[1:])
    volume = sum(tensor_volume(serial, words, (1, 28, 28), BATCH // dp, tp_size, 8).values())
    grads = sum(gradient_bytes(serial, words, tp_size, r, 8) for r in range(tp_size))
    return size * volume + (dp * grads if dp > 1 else 0)


def plot(rows, ranks, path):
    """Bars of bytes and time per step for each layout row (name, ms, bytes, predicted, gap)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    names = [r[0] for r in rows]
    left.barh(names, [r[2] / 1e6 for r in rows], label="counted")
    left.scatter(
        [r[3] / 1e6 for r in rows], names, color="black", marker="|", s=200, label="predicted"
    )
    left.set(xlabel="MB sent per step (all ranks)", ylabel="layout", title="communication")
    left.legend(fontsize=8)
    right.barh(names, [r[1] for r in rows])
    right.set(xlabel="time per step (ms)", ylabel="layout", title="step time")
    fig.suptitle(f"LeNet-5 on {ranks} ranks: one model, five layouts")
    fig.tight_layout()
    fig.savefig(path)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--plot", help="write a bar chart of bytes and time per step here")
    args = parser.parse_args()
    comm = dist.init()
    train_set = md.data.FashionMNIST(train=True)
    order = np.random.default_rng(0).permutation(len(train_set))[: args.steps * BATCH]
    data = [
        (train_set.images[i].astype("float64"), train_set.labels[i])
        for i in order.reshape(args.steps, BATCH)
    ]
    reference = lenet()
    opt = optim.Momentum(reference.parameters(), lr=0.05, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(reference(md.Tensor(x)), y).backward()
        opt.step()
    want = dict(reference.named_parameters())
    rows = []
    for name, extents, plan in layouts(comm.size):
        serial, seconds, sent = train(comm, extents, plan, data)
        gap = max(np.abs(p.data - want[n].data).max() for n, p in serial.named_parameters())
        grid = ",".join(f"{k}={v}" for k, v in extents.items())
        rows.append(
            (f"{name} ({grid})", 1000 * seconds, sent, predicted(extents, plan, comm.size), gap)
        )
    if comm.rank:
        return
    print(f"LeNet-5, {args.steps} steps of {BATCH} Fashion-MNIST images on {comm.size} ranks")
    print(f"{'layout':<28}{'ms/step':>9}{'bytes/step':>13}{'predicted':>13}{'vs 1 process':>14}")
    for name, ms, sent, formula, gap in rows:
        print(f"{name:<28}{ms:>9.1f}{sent:>13,.0f}{formula:>13,.0f}{gap:>14.1e}")
    if args.plot:
        plot(rows, comm.size, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
