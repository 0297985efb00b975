"""ZeRO's memory: the bytes of parameters, gradients and optimizer state each rank holds.

    mpiexec -n 2 python examples/15_zero_memory.py [--steps 3] [--plot zero.png]

AlexNet-small (``--model alexnet-small``: 428,682 float32 parameters for one input channel)
trains a few steps of random 28x28 images (a batch of 16 a rank, momentum) from the same
weights under plain data parallelism (stage 0) and under ZeRO stages 1 and 2
(``md.dist.ZeroOptimizer``). Each rank counts what it holds: the parameters, the gradients
(their peak, sampled as backward makes each one and after the update) and the optimizer's
state; a view counts as the array it views, once. Next to the counts, the formula of
Rajbhandari et al. 2020 (§5) for P parameter bytes, K state arrays a parameter (momentum: 1)
and this rank's shard s of the flat vector:

    stage 0   P + P + K P        stage 1   P + P + K s        stage 2   P + s + K s

Stage 2 also holds, for a moment, the whole gradient of the bucket that backward is
completing (``--bucket-mb``): the excess over its formula. The weights stay those of plain
data parallelism, which the last column shows. ``--plot`` draws the bytes against the
formula (needs matplotlib).
"""

import argparse

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.dist import DistributedOptimizer, ZeroOptimizer
from minidl.intmath import block_sizes

STAGES = (0, 1, 2)
STATE_ARRAYS = 1  # momentum's velocity
BATCH = 16


def distinct_bytes(arrays):
    """Bytes of the distinct arrays behind ``arrays``: a view counts as the array it views."""
    owners = {}
    for a in arrays:
        while isinstance(a.base, np.ndarray):
            a = a.base
        owners[id(a)] = a.nbytes
    return sum(owners.values())


def train(comm, stage, steps, bucket_mb):
    """The weights after ``steps`` steps under ``stage``, and the bytes this rank held:
    (parameters, peak of the gradients, optimizer state)."""
    md.manual_seed(0)
    model = md.models.alexnet(num_classes=10, variant="small", in_channels=1)
    params = list(model.parameters())
    inner = optim.Momentum(params, lr=0.01, momentum=0.9)
    if stage:
        opt = ZeroOptimizer(inner, comm, stage=stage, bucket_mb=bucket_mb)
    else:
        opt = DistributedOptimizer(inner, comm, bucket_mb=bucket_mb)
    peak = [0]

    def sample(_=None):  # every gradient alive: the model's, and ZeRO's averaged shard
        grads = [p.grad for p in params + inner.params if p.grad is not None]
        peak[0] = max(peak[0], distinct_bytes(grads))

    for p in params:
        p.register_post_accumulate_grad_hook(sample)
    rng = np.random.default_rng([7, comm.rank])
    for _ in range(steps):
        x = rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), rng.integers(0, 10, BATCH)).backward()
        opt.step()
        sample()
    state = [v for s in inner.state for v in s.values() if isinstance(v, np.ndarray)]
    held = (distinct_bytes(p.data for p in params + inner.params), peak[0], distinct_bytes(state))
    return np.concatenate([p.data.ravel() for p in params]), held


def formula(stage, count, ranks, rank, itemsize=4):
    """(parameters, gradients, state) in bytes on ``rank`` of ``ranks`` for ``count``
    parameters: the whole vector P, or this rank's shard s of it from the stage on."""
    whole = count * itemsize
    shard = block_sizes(count, ranks)[rank] * itemsize
    return whole, shard if stage >= 2 else whole, STATE_ARRAYS * (shard if stage else whole)


def plot(rows, ranks, path):
    """Stacked bars of the bytes rank 0 held per stage, and a tick at each formula's total."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    names = [f"stage {stage}" for stage, *_ in rows]
    bottom = np.zeros(len(rows))
    for i, kind in enumerate(("parameters", "gradients", "optimizer state")):
        mib = np.array([held[i] / 2**20 for _, held, _, _ in rows])
        ax.bar(names, mib, bottom=bottom, label=f"{kind} (counted)")
        bottom += mib
    totals = [sum(expected) / 2**20 for _, _, expected, _ in rows]
    ax.scatter(names, totals, color="black", marker="_", s=900, label="formula, in all")
    ax.set(xlabel="ZeRO stage", ylabel="held by rank 0 (MiB)")
    ax.set_title(f"AlexNet-small on {ranks} ranks: what each rank keeps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=0.25)
    parser.add_argument("--plot", help="write a bar chart of the bytes per rank here")
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    rows = []
    for stage in STAGES:
        weights, held = train(comm, stage, args.steps, args.bucket_mb)
        if stage == 0:
            plain = weights
        expected = formula(stage, weights.size, comm.size, comm.rank)
        rows.append((stage, held, expected, float(np.abs(weights - plain).max())))
    everyone = comm.allgather_object(rows)
    if comm.rank:
        return
    print(f"AlexNet-small, {weights.size:,} parameters, {args.steps} steps on {comm.size} ranks")
    kinds = ("parameters", "gradients", "optimizer state")
    print(f"{'stage':<7}{'rank':<6}" + "".join(f"{k:<24}" for k in kinds) + "vs stage 0")
    print(f"{'':13}" + f"{'bytes (formula)':<24}" * 3)
    for rank, mine in enumerate(everyone):
        for stage, held, expected, gap in mine:
            cells = "".join(f"{f'{b:,} ({e:,})':<24}" for b, e in zip(held, expected))
            print(f"{stage:<7}{rank:<6}{cells}{gap:.1e}")
    if args.plot:
        plot(everyone[0], comm.size, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
