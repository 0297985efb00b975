"""Training steps on dp x tp grids against pure data parallelism, same global batch.

    mpiexec -n P python benchmarks/bench_grid.py [--model lenet5] [--batch 64] [--steps 10]
                                                  [--rounds 5]

Every layout trains the model (float32, SGD momentum 0.9, one BLAS thread per
rank) on the same global batch of random images (28x28; 227x227 for AlexNet's
``original`` variant, whose grouped layers go one group per rank on tp=2): ``dp=P`` (each rank a
batch / P share, gradients averaged by ``DistributedOptimizer``) and every
``dp=D,tp=T`` with T > 1 dividing P (layers placed by ``TensorParallel``'s rule,
gradients averaged over the D replicas), and Krizhevsky's one weird trick on
``tp=P`` (the layers before the first ``Linear`` data-parallel over the P ranks,
the fully connected ones split; ``one_weird_trick_plan``). The layouts alternate within each
round (``--rounds``), so they share the machine's load alike; a step's time is
the slowest rank's, and the medians are printed with their ratio to ``dp=P``.
Bytes per step, summed over the ranks, are counted by the tensor-parallel
collectives (``TRAFFIC``) and by the data-parallel optimizer (its allreduce
payload), with ``minidl.perf.tensor_volume``'s formula beside them.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl import dist, optim
from minidl import functional as F
from minidl.dist import tensor as tp
from minidl.perf.tensor_volume import gradient_bytes, tensor_volume

SHAPES = {"lenet5": (1, 28, 28), "alexnet-small": (1, 28, 28), "alexnet-original": (3, 227, 227)}
CLASSES = {"alexnet-original": 1000}


def build(name):
    md.manual_seed(0)
    if name.startswith("alexnet"):
        variant = name.partition("-")[2]
        channels, classes = SHAPES[name][0], CLASSES.get(name, 10)
        return md.models.alexnet(classes, variant, in_channels=channels, conv_algo="im2col")
    return md.models.lenet5(conv_algo="im2col")


class Layout:
    """One grid of the job with its model, optimizer and counters."""

    def __init__(self, comm, model_name, dp, tp_size, batch, layout=tp.plan):
        self.name = f"dp={dp}" + (f",tp={tp_size}" if tp_size > 1 else "")
        if layout is tp.one_weird_trick_plan:
            self.name += " (one weird trick)"
        self.grid = dist.Grid(comm, dp=dp, tp=tp_size)
        self.replicas = self.grid.group("dp")
        serial = build(model_name)
        self.parallel = tp.TensorParallel(serial, self.grid.group("tp"), layout(serial))
        self.model = self.parallel.module
        self.opt = optim.Momentum(self.model.parameters(), lr=0.01, momentum=0.9)
        if dp > 1:
            self.opt = dist.DistributedOptimizer(self.opt, self.replicas)
        self.share = tp.Split(batch, dp).slice(self.replicas.rank)
        plan, rank = self.parallel.plan, self.grid.coords["tp"]
        self.shape = SHAPES[model_name]
        volume = tensor_volume(serial, plan, self.shape, batch // dp, tp_size)
        self.predicted = {
            "tp": sum(volume.values()),
            "dp": gradient_bytes(serial, plan, tp_size, rank) if dp > 1 else 0,
        }
        self.times, self.steps = [], 0

    def run(self, data):
        """Seconds of one pass over ``data``, the slowest rank's, per step."""
        self.model.train()
        self.grid.world.barrier()
        start = time.perf_counter()
        for x, y in data:
            self.opt.zero_grad()
            F.cross_entropy(self.model(md.Tensor(x[self.share])), y[self.share]).backward()
            self.opt.step()
        seconds = max(self.grid.world.allgather_object(time.perf_counter() - start))
        self.times.append(seconds / len(data))
        self.steps += len(data)

    def reset(self, traffic_before):
        self.times, self.steps, self.traffic = [], 0, traffic_before
        if hasattr(self.opt, "stats"):
            self.opt.stats["bytes_reduced"] = 0

    def bytes_per_step(self):
        """{"tp", "dp"}: measured bytes per step summed over the ranks, and the predicted."""
        mine = {
            "tp": sum(self.traffic.values()),
            "dp": getattr(self.opt, "stats", {}).get("bytes_reduced", 0),
        }
        everyone = self.grid.world.allgather_object((mine, self.predicted))
        return {
            k: (sum(m[k] for m, _ in everyone) / self.steps, sum(p[k] for _, p in everyone))
            for k in mine
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lenet5", choices=tuple(SHAPES))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    comm = dist.init()
    size = comm.size
    grids = [(size // t, t) for t in range(1, size + 1) if size % t == 0]
    layouts = [Layout(comm, args.model, dp, t, args.batch) for dp, t in grids]
    layouts.append(Layout(comm, args.model, 1, size, args.batch, tp.one_weird_trick_plan))
    rng = np.random.default_rng(0)
    data = [
        (
            rng.standard_normal((args.batch, *SHAPES[args.model])).astype("float32"),
            rng.integers(0, CLASSES.get(args.model, 10), args.batch),
        )
        for _ in range(args.steps)
    ]
    for layout in layouts:  # warm-up: the autotuner, the buffers
        layout.run(data[:2])
    for layout in layouts:
        layout.reset({})
    for _ in range(args.rounds):
        for layout in layouts:
            before = dict(tp.TRAFFIC)
            layout.run(data)
            for key, value in tp.TRAFFIC.items():
                layout.traffic[key] = layout.traffic.get(key, 0) + value - before.get(key, 0)
    reports = [(layout, layout.bytes_per_step()) for layout in layouts]
    if comm.rank:
        return
    base = statistics.median(layouts[0].times)
    print(
        f"{args.model} on {size} ranks, global batch {args.batch}, float32, median of "
        f"{args.rounds} rounds of {args.steps} steps; bytes per step summed over the ranks"
    )
    print("layout | ms/step | vs dp | tp bytes meas./pred. | dp allreduce payload meas./pred.")
    for layout, sent in reports:
        ms = 1000 * statistics.median(layout.times)
        print(
            f"{layout.name} | {ms:.1f} | {ms / (1000 * base):.2f} | "
            f"{sent['tp'][0]:,.0f} / {sent['tp'][1]:,} | {sent['dp'][0]:,.0f} / {sent['dp'][1]:,}"
        )


if __name__ == "__main__":
    main()
