"""Synchronised batch norm: data parallelism that trains what one process with the whole batch
trains, batch statistics included.

    mpiexec -n 2 python examples/16_sync_batchnorm.py [--steps 6] [--batch-size 16]

A small convolutional network with a batch-norm layer (conv, BatchNorm2d, ReLU, pooling,
linear; float64) trains a few momentum steps of Fashion-MNIST on each rank's share of the
batch, from the same weights, three ways:

- one process with the whole batch (the batch of all ranks): the reference;
- data parallelism with plain batch norm: each rank normalises with the mean and variance
  of its own share, so the outputs, the gradients and the running estimates are those of a
  smaller batch (Ioffe & Szegedy 2015's statistics are the mini-batch's);
- data parallelism with synchronised batch norm (``md.dist.convert_sync_batchnorm``): the
  shares' statistics joined by one allgather (Chan et al.'s parallel variance) and the
  backward's two means by one allreduce.

After each step it prints how far each run's weights and running estimates are from the
reference's: the plain run drifts from the first step on, the synchronised one stays at
float64 rounding. Then ``verify`` (``minidl.dist.verify``) trains both layouts again beside
one process and names the first tensor that differs: without synchronisation, the output of
the batch-norm layer in the first step; with it, none.
"""

import argparse

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import layers as L
from minidl import optim
from minidl.dist import DistributedOptimizer, convert_sync_batchnorm
from minidl.dist.verify import verify
from minidl.intmath import block_bounds


class SmallNet(L.Module):
    """conv 3x3 (8 channels), batch norm, ReLU, 2x2 max pooling, linear: 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv = L.Conv2d(1, 8, 3, padding=1)
        self.bn = L.BatchNorm2d(8)
        self.relu = L.ReLU()
        self.pool = L.MaxPool2d(2)
        self.flatten = L.Flatten()
        self.fc = L.Linear(8 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.relu(self.bn(self.conv(x))))))


def small_net():
    md.manual_seed(0)
    return SmallNet().to("float64")


def state(model):
    """Every parameter and buffer (running estimates) of ``model``, in one float64 vector."""
    return np.concatenate([np.ravel(v).astype("float64") for v in model.state_dict().values()])


def train(batches, comm=None, sync=False):
    """The state after each step: one process on the whole batches (``comm`` None), or this
    rank's share of each under data parallelism, with batch norm synchronised or not."""
    model = small_net()
    opt = optim.Momentum(model.parameters(), lr=0.05, momentum=0.9)
    if comm is not None:
        opt = DistributedOptimizer(opt, comm)
        if sync:
            convert_sync_batchnorm(model, comm)
    states = []
    for x, y in batches:
        if comm is not None:
            rows = slice(*block_bounds(len(y), comm.size)[comm.rank])
            x, y = x[rows], y[rows]
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y).backward()
        opt.step()
        states.append(state(model))
    return states


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16, help="images a rank, a step")
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    whole = args.batch_size * comm.size
    images = md.data.FashionMNIST(train=True).first(args.steps * whole)
    batches = [
        (images.images[i : i + whole].astype("float64"), images.labels[i : i + whole])
        for i in range(0, args.steps * whole, whole)
    ]
    reference = train(batches)
    plain = train(batches, comm, sync=False)
    synced = train(batches, comm, sync=True)
    if comm.rank == 0:
        print(
            f"{args.steps} steps of {whole} Fashion-MNIST images ({args.batch_size} a rank on "
            f"{comm.size} ranks): max |weights and running estimates - one process's|"
        )
        print(f"{'step':<6}{'plain batch norm':<20}synchronised batch norm")
        for step, (want, a, b) in enumerate(zip(reference, plain, synced), 1):
            print(f"{step:<6}{np.abs(a - want).max():<20.2e}{np.abs(b - want).max():.2e}")
    for sync in (False, True):
        verdict = verify(small_net, steps=2, batch_size=args.batch_size, subset=256, sync_bn=sync)
        if comm.rank == 0:
            print(verdict.summary())


if __name__ == "__main__":
    main()
