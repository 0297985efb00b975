"""ZeRO's memory: the bytes of parameters, gradients and optimizer state each rank holds.

    mpiexec -n 2 python examples/15_zero_memory.py [--steps 3] [--bucket-mb 1] [--plot zero.png]

AlexNet-small (428,682 float32 parameters for one input channel) trains a few steps of
random 28x28 images (a batch of 16 a rank, momentum) from the same weights under plain data
parallelism (stage 0) and ZeRO stages 1, 2 and 3 (``md.dist.ZeroOptimizer``). Each rank
counts the most bytes it holds of each kind, distinct arrays by address (``distinct_bytes``:
a view counts as the array it views), sampled as backward makes each gradient (before ZeRO
reduces it), as stage 3 gathers a layer's weights, and after the update. Beside the counts,
what ``md.dist.memory.predict_memory`` predicts (``perf.memory``'s formulas, Rajbhandari et
al. 2020 §5): with P parameters, K state arrays a parameter (momentum 1, Adam 2), s this
rank's share of them and A the largest layer's, in numbers

    stage 0   P + P + K P          stage 2   P + s + K s
    stage 1   P + P + K s          stage 3   (s + A) + s + K s

Stages 2 and 3 also hold, for a moment, the whole gradient of the bucket backward is
completing (``--bucket-mb``; 1 MiB cuts AlexNet-small in two) where the formula counts its
share: the excess. A bucket smaller than the first fully connected layer's weights (0.56
MiB) runs that layer in tiles (``TiledLinear``), which stage 3 gathers one at a time: less
than the formula's A. Each row ends with the rank's total over plain data parallelism's, and
how far its weights are from plain's (ZeRO trains the same model). ``--plot`` draws the
bytes against the formula (needs matplotlib).
"""

import argparse

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.dist import DistributedOptimizer, GridShape, ZeroOptimizer
from minidl.dist.memory import predict_memory
from minidl.perf.graph_memory import distinct_bytes

STAGES = (0, 1, 2, 3)
KINDS = ("parameters", "gradients", "optimizer state")
IMAGE, BATCH, RULE = (1, 28, 28), 16, "momentum"


def alexnet_small():
    md.manual_seed(0)
    return md.models.alexnet(num_classes=10, variant="small", in_channels=IMAGE[0])


def train(comm, stage, args):
    """The weights after ``args.steps`` steps under ``stage``, and the most bytes this rank
    held of each kind: (parameters, gradients, optimizer state)."""
    model = alexnet_small()
    params = list(model.parameters())
    inner = optim.OPTIMIZERS[RULE](params, lr=0.01)
    peak = [0, 0, 0]

    def sample(_=None, gathered=()):  # the model's arrays, ZeRO's blocks (``inner.params``)
        held = params + inner.params
        state = [v for s in inner.state for v in s.values() if isinstance(v, np.ndarray)]
        now = (
            distinct_bytes([p.data for p in held] + list(gathered)),
            distinct_bytes(p.grad for p in held if p.grad is not None),
            distinct_bytes(state),
        )
        peak[:] = map(max, peak, now)

    for p in params:  # before ZeRO's own hooks: the whole gradient, before it is reduced
        p.register_post_accumulate_grad_hook(sample)
    if stage:
        opt = ZeroOptimizer(inner, comm, stage=stage, bucket_mb=args.bucket_mb, model=model)
    else:
        opt = DistributedOptimizer(inner, comm, bucket_mb=args.bucket_mb)
    if stage == 3:  # a layer's weights, as they are gathered for it to run
        gather = opt.weights_of

        def weights_of(*part):
            whole = gather(*part)
            sample(gathered=[whole])
            return whole

        opt.weights_of = weights_of
    rng = np.random.default_rng([7, comm.rank])
    for _ in range(args.steps):
        x = rng.standard_normal((BATCH, *IMAGE)).astype(np.float32)
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), rng.integers(0, 10, BATCH)).backward()
        opt.step()
        sample()
    if stage == 3:
        opt.gather_model()
    return np.concatenate([p.data.ravel() for p in params]), tuple(peak)


def predicted(comm, stage, bucket_mb):
    """(parameters, gradients, optimizer state) ``predict_memory`` gives this rank."""
    ranks = predict_memory(
        alexnet_small(),
        IMAGE,
        BATCH,
        RULE,
        GridShape(dp=comm.size),
        zero=stage,
        bucket_mb=bucket_mb,
    )
    memory = ranks[comm.rank].memory
    return memory.params, memory.grads, memory.state


def plot(rows, ranks, path):
    """Stacked bars of the bytes rank 0 held per stage, and a tick at each formula's total."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    names = [f"stage {stage}" for stage, *_ in rows]
    bottom = np.zeros(len(rows))
    for i, kind in enumerate(KINDS):
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
    parser.add_argument("--bucket-mb", type=float, default=1.0)
    parser.add_argument("--plot", help="write a bar chart of the bytes per rank here")
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    rows = []
    for stage in STAGES:
        weights, held = train(comm, stage, args)
        if stage == 0:
            plain = weights
        gap = float(np.abs(weights - plain).max())
        rows.append((stage, held, predicted(comm, stage, args.bucket_mb), gap))
    everyone = comm.allgather_object(rows)
    if comm.rank:
        return
    print(
        f"AlexNet-small, {weights.size:,} parameters, {RULE}, {args.steps} steps "
        f"on {comm.size} ranks: the most bytes a rank held, counted (predicted)"
    )
    head = f"{'stage':<7}{'rank':<6}" + "".join(f"{k:<24}" for k in KINDS)
    print(head + f"{'total / stage 0':<17}weights vs stage 0")
    for stage in STAGES:
        for rank, mine in enumerate(everyone):
            _, held, expected, gap = mine[stage]
            cells = "".join(f"{f'{b:,} ({e:,})':<24}" for b, e in zip(held, expected))
            ratio = f"{sum(held) / sum(mine[0][1]):.2f} ({sum(expected) / sum(mine[0][2]):.2f})"
            print(f"{stage:<7}{rank:<6}{cells}{ratio:<17}{gap:.1e}")
    if args.plot:
        plot(everyone[0], comm.size, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
