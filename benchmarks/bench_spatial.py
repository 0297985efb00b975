"""LeNet-5 training steps split over image rows against pure data parallelism, same global batch.

    mpiexec -n P python benchmarks/bench_spatial.py [--batch 64] [--steps 20] [--rounds 5]

Every layout trains LeNet-5 (float32, SGD momentum 0.9) on the same global
batch of random 28x28 images, one BLAS thread per rank:

- ``dp=P``: each rank a batch / P share, gradients averaged (``DistributedOptimizer``);
- ``spatial=P``: each rank all images, its block of rows (``spatial_parallel``);
- on 4 ranks also ``spatial=4`` as 2x2 blocks of rows and columns, and ``dp=2,spatial=2``.

The layouts alternate within each round (``--rounds``), so they share the
machine's load alike; the step time is the slowest rank's, and medians are
printed with the ratio to ``dp=P``. Bytes per step, summed over the ranks, are
counted by the spatial layers (halo, gather, gradient sum) and by the
data-parallel optimizer (its allreduce payload), with ``spatial.step_bytes``
and the payload formula (every rank reduces all parameters) beside them.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl import dist, optim
from minidl import functional as F
from minidl.dist.spatial import local_rows, spatial_parallel, step_bytes


class Layout:
    """One grid of the job with its model, optimizer and counters."""

    def __init__(self, comm, dp, spatial, batch, cols=1):
        self.name = f"dp={dp}" + (f",spatial={spatial}" if spatial > 1 else "")
        self.name += f" ({spatial // cols}x{cols} blocks)" if cols > 1 else ""
        self.grid = dist.Grid(comm, dp=dp, spatial=spatial)
        self.rows, self.replicas = self.grid.group("spatial"), self.grid.group("dp")
        md.manual_seed(0)
        model = md.models.lenet5(conv_algo="im2col")
        self.cols = cols
        self.model = spatial_parallel(model, self.rows, 28, 28, cols) if spatial > 1 else model
        self.opt = optim.Momentum(self.model.parameters(), lr=0.01, momentum=0.9)
        if dp > 1:
            self.opt = dist.DistributedOptimizer(self.opt, self.replicas)
        self.share = slice(self.replicas.rank * batch // dp, (self.replicas.rank + 1) * batch // dp)
        self.predicted = step_bytes(model, (batch // dp, 1, 28, 28), spatial, 4, cols)
        self.predicted = {k: v * dp for k, v in self.predicted.items()}  # every replica sends them
        self.parameter_bytes = sum(p.data.nbytes for p in model.parameters())
        self.times, self.steps = [], 0

    def run(self, data):
        """Seconds of one pass over ``data``, the slowest rank's."""
        self.grid.world.barrier()
        start = time.perf_counter()
        for x, y in data:
            x = x[self.share]
            if self.rows.size > 1:
                x = local_rows(x, self.rows, self.cols)
            self.opt.zero_grad()
            F.cross_entropy(self.model(md.Tensor(x)), y[self.share]).backward()
            self.opt.step()
        seconds = max(self.grid.world.allgather_object(time.perf_counter() - start))
        self.times.append(seconds / len(data))
        self.steps += len(data)

    def bytes_per_step(self):
        """{counter: bytes per step summed over the ranks} of what this layout sent."""
        counters = getattr(self.model, "counters", {})
        mine = {k: counters.get(k, 0) for k in ("halo_bytes", "gather_bytes", "grad_bytes")}
        mine["allreduce_payload"] = getattr(self.opt, "stats", {}).get("bytes_reduced", 0)
        totals = self.grid.world.allgather_object(mine)
        return {k: sum(t[k] for t in totals) / self.steps for k in mine}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    comm = dist.init()
    size = comm.size
    grids = [(size, 1, 1), (1, size, 1)]
    if size == 4:
        grids += [(1, 4, 2), (2, 2, 1)]
    layouts = [Layout(comm, dp, spatial, args.batch, cols) for dp, spatial, cols in grids]
    rng = np.random.default_rng(0)
    data = [
        (
            rng.standard_normal((args.batch, 1, 28, 28)).astype("float32"),
            rng.integers(0, 10, args.batch),
        )
        for _ in range(args.steps)
    ]
    for layout in layouts:  # warm-up: the autotuner, the buffers
        layout.run(data[:2])
        layout.times, layout.steps = [], 0
        if hasattr(layout.model, "counters"):
            layout.model.counters.clear()
        if hasattr(layout.opt, "stats"):
            layout.opt.stats["bytes_reduced"] = 0
    for _ in range(args.rounds):
        for layout in layouts:
            layout.run(data)
    reports = [(layout, layout.bytes_per_step()) for layout in layouts]
    if comm.rank:
        return
    base = statistics.median(layouts[0].times)
    print(
        f"LeNet-5 on {size} ranks, global batch {args.batch}, float32, median of {args.rounds} "
        f"rounds of {args.steps} steps; bytes per step summed over the ranks"
    )
    print(
        "layout | ms/step | vs dp | halo B meas./pred. | gather+grad B meas./pred. | "
        "allreduce payload B meas./pred."
    )
    for layout, sent in reports:
        ms = 1000 * statistics.median(layout.times)
        pred = layout.predicted
        dp = layout.replicas.size
        payload = size * layout.parameter_bytes if dp > 1 else 0
        print(
            f"{layout.name} | {ms:.2f} | {ms / (1000 * base):.2f} | "
            f"{sent['halo_bytes']:.0f} / {pred['halo_bytes']} | "
            f"{sent['gather_bytes'] + sent['grad_bytes']:.0f} / "
            f"{pred['gather_bytes'] + pred['grad_bytes']} | "
            f"{sent['allreduce_payload']:.0f} / {payload}"
        )


if __name__ == "__main__":
    main()
