"""Tensor and pipeline parallelism on 2 ranks: the bytes each rank holds, against one process.

    mpiexec -n 2 python benchmarks/bench_shares.py [--variant original] [--layout tp|pp]

(``-n 1 ... --layout tp``: one process, the baseline of the peak resident memory.)

AlexNet (1000 classes, ``--variant original`` 227x227 or ``torchvision`` 224x224) is built
from the seed as one process builds it, then placed as ``minidl train --grid tp=2`` and
``--grid pp=2`` place it (``TensorParallel`` by the rule; ``PipelineTrainer`` on the memory
cut, 1F1B, 4 micro-batches) and the serial model dropped. Each rank trains ``--steps`` steps
on random data with momentum and counts, as ``train.memory_record`` does (distinct arrays
by address), its parameters, the most gradient bytes alive at once (sampled as each
gradient is accumulated and after the step) and its optimizer state. It prints each rank's
sum against one process's P + P + K P (P parameter bytes, K = 1 for momentum), what
``dist.memory.predict_memory`` predicts for the rank, and the rank's peak resident memory
(``ru_maxrss``: it includes building the serial model before the placement drops it).
"""

import argparse
import gc

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.dist.grid import GridShape
from minidl.dist.memory import predict_memory
from minidl.dist.pipeline import PipelineTrainer, memory_partition
from minidl.dist.tensor import TensorParallel
from minidl.perf.graph_memory import distinct_bytes
from minidl.train.memory_record import peak_rss

SIDE = {"original": 227, "torchvision": 224}


def serial_model(variant):
    md.manual_seed(0)
    return md.models.alexnet(num_classes=1000, variant=variant)


def tracked(params, optimizer, peak):
    """Update ``peak`` (a dict) with the bytes of parameters, gradients and state now alive."""
    state = [v for s in optimizer.state for v in s.values() if isinstance(v, np.ndarray)]
    now = {
        "params": distinct_bytes(p.data for p in params),
        "grads": distinct_bytes(p.grad for p in params if p.grad is not None),
        "state": distinct_bytes(state),
    }
    for kind, value in now.items():
        peak[kind] = max(peak.get(kind, 0), value)


def train_tp(comm, variant, batch, steps):
    model = TensorParallel(serial_model(variant), comm).module  # the serial model is dropped
    gc.collect()
    params = list(model.parameters())
    opt = optim.Momentum(params, lr=1e-3, momentum=0.9)
    peak = {}
    for p in params:
        p.register_post_accumulate_grad_hook(lambda _: tracked(params, opt, peak))
    rng = np.random.default_rng(0)  # the same batch on both ranks of the tp group
    x = rng.standard_normal((batch, 3, SIDE[variant], SIDE[variant])).astype(np.float32)
    y = rng.integers(0, 1000, batch)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y).backward()
        opt.step()
        tracked(params, opt, peak)
    return peak


def train_pp(comm, variant, batch, steps, micro_batches=4):
    serial = serial_model(variant)
    shape = (3, SIDE[variant], SIDE[variant])
    cut = memory_partition(
        serial, comm.size, shape, batch, micro_batches=micro_batches, optimizer="momentum"
    )
    opts = []

    def make(ps):
        opts.append(optim.Momentum(ps, lr=1e-3, momentum=0.9))
        return opts[-1]

    trainer = PipelineTrainer(serial, comm, optimizer=make, stages=cut, micro_batches=micro_batches)
    del serial  # the trainer keeps this rank's stage alone
    gc.collect()
    params = [p for chunk in trainer.chunks for p in chunk.parameters()]
    peak = {}
    for p in params:
        p.register_post_accumulate_grad_hook(lambda _: tracked(params, opts[0], peak))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.integers(0, 1000, batch)
    for _ in range(steps):
        trainer.step(x, y)
        tracked(params, opts[0], peak)
    return peak, cut


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=tuple(SIDE), default="original")
    parser.add_argument("--layout", choices=("tp", "pp"), default="tp")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    one = serial_model(args.variant)
    p = sum(q.data.nbytes for q in one.parameters())
    whole = p + p + p  # weights, gradients, momentum
    shape = (3, SIDE[args.variant], SIDE[args.variant])
    grid = GridShape(**{args.layout: comm.size})
    options = dict(optimizer="momentum", grid=grid)
    if args.layout == "pp":
        options |= dict(micro_batches=4, stages="memory")
    predicted = predict_memory(one, shape, args.batch_size, **options)
    del one
    gc.collect()
    if args.layout == "tp":
        peak, note = train_tp(comm, args.variant, args.batch_size, args.steps), ""
    else:
        peak, cut = train_pp(comm, args.variant, args.batch_size, args.steps)
        note = f" stages {' '.join(f'{a}-{b - 1}' for a, b in cut.bounds)} (by memory)"
    mine = comm.allgather_object((peak, peak_rss()))
    if comm.rank:
        return
    for rank, (held, rss) in enumerate(mine):
        total = held["params"] + held["grads"] + held["state"]
        memory = predicted[rank].memory
        formula = memory.params + memory.grads + memory.state
        print(
            f"alexnet {args.variant} {args.layout}={comm.size} rank {rank}:{note} params "
            f"{held['params'] / 2**20:.1f} MiB, gradients {held['grads'] / 2**20:.1f} MiB, "
            f"state {held['state'] / 2**20:.1f} MiB: {total / whole:.3f}x one process "
            f"(predicted {formula / whole:.3f}x, measured/predicted {total / formula:.3f}); "
            f"peak RSS {rss / 2**20:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
