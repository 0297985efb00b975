"""Exercise 7: data-parallel LeNet-5 over MPI, written out (what `minidl train --dist sync` does).

    mpiexec -n 2 python examples/07_data_parallel_lenet.py [--epochs 1] [--allreduce ring]
            [--subset N] [--test-subset N]

(``--subset 4000 --test-subset 1000``: a quick run of a few seconds.)

Each rank builds the same model, sees its own shard of every global batch,
and the wrapped optimizer averages the gradients before each update, so all
replicas stay identical: the invariant checked at the end. Rank 0 reports
throughput, test accuracy and how much of the allreduce time overlapped
with backward.
"""

import argparse
import hashlib

import numpy as np
from threadpoolctl import threadpool_limits

import minidl as md
from minidl import optim
from minidl.data import DataLoader, FashionMNIST
from minidl.dist import ALLREDUCE_ALGORITHMS, DistributedOptimizer
from minidl.train.loop import evaluate, train_epoch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--allreduce", default="auto", choices=("auto",) + ALLREDUCE_ALGORITHMS)
    parser.add_argument("--subset", type=int, default=None, help="train on the first N images")
    parser.add_argument(
        "--test-subset",
        type=int,
        default=None,
        help="measure the accuracy on the first N test images",
    )
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    threadpool_limits(1)  # one BLAS thread per rank: the ranks already fill the cores

    comm = md.dist.init()
    md.manual_seed(comm.rank)  # different on purpose: the wrapper broadcasts rank 0's weights
    train, test = FashionMNIST(args.data_dir, train=True), FashionMNIST(args.data_dir, train=False)
    train = train.first(args.subset)
    test = test.first(args.test_subset)
    model = md.models.lenet5()
    opt = DistributedOptimizer(
        optim.Momentum(model.parameters(), lr=0.01, momentum=0.9),
        comm,
        allreduce=args.allreduce,
        model=model,
    )
    loader = DataLoader(train, args.batch_size, shuffle=True, rank=comm.rank, world_size=comm.size)
    test_loader = DataLoader(test, 1000, rank=comm.rank, world_size=comm.size)
    for epoch in range(1, args.epochs + 1):
        stats = train_epoch(model, opt, loader, epoch, comm=comm)
        result = evaluate(model, test_loader, 10, comm=comm)
        if comm.rank == 0:
            print(
                f"epoch {epoch}: {stats['seconds']:.2f} s, {stats['images_per_s']:.0f} img/s "
                f"on {comm.size} ranks, test accuracy {100 * result['acc']:.2f}%"
            )
    digest = hashlib.sha1(
        np.concatenate([p.numpy().ravel() for p in model.parameters()])
    ).hexdigest()
    digests = comm.allgather_object(digest)
    if comm.rank == 0:
        print(
            f"replicas bit-identical: {len(set(digests)) == 1}; allreduce overlapped with "
            f"backward: {100 * opt.overlap_fraction():.0f}% of "
            f"{opt.stats['comm_seconds']:.2f} s"
        )


if __name__ == "__main__":
    main()
