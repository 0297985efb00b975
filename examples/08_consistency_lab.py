"""Consistency lab: a parameter server and its workers, one mode at a time, with a straggler.

    mpiexec -n 3 python examples/08_consistency_lab.py [--mode ssp:2] [--factor 3]
            [--epochs 2] [--subset 6000]

Rank 0 serves the weights and runs the optimizer; ranks 1.. are workers, the
last one FACTOR times slower. The script is the training loop of
``minidl train --dist MODE`` written out with the session API, so you can see
each piece: ``make_session`` gives every rank its role, workers train with
``session.optimizer`` (whose ``step()`` pushes a gradient and pulls weights),
servers ``serve``, and ``finish_epoch`` brings everyone back together.

Things to look for: under bsp the fast worker waits at the gate about as
long as the straggler sleeps and every update has staleness 0; under ssp:2
the staleness reaches 2 and never more, and the fast worker still waits once
it is 2 clocks ahead (a persistent straggler sets the pace of every bounded
mode); under asp nobody waits, the fast worker takes more of the epoch's
batches and the staleness has no bound.
"""

import argparse

import minidl as md
from minidl import optim
from minidl.data import DataLoader, FashionMNIST
from minidl.dist import DistConfig, init, make_session
from minidl.dist.straggler import Straggler
from minidl.perf.telemetry import StalenessHistogram, summarize_epoch
from minidl.train.loop import evaluate, train_epoch
from minidl_app.cli.train import parse_dist_mode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="ssp:2", help="bsp, ssp:S, asp or easgd")
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--subset", type=int, default=6000)
    args = parser.parse_args()

    comm = init()
    md.manual_seed(0)
    train_set = FashionMNIST(train=True).first(args.subset)
    test_loader = DataLoader(FashionMNIST(train=False), 1000, rank=comm.rank, world_size=comm.size)
    model = md.models.lenet5(conv_algo="im2col")
    options = DistConfig(mode=parse_dist_mode(args.mode))  # e.g. DistMode("ssp", staleness=2)
    session = make_session(
        options, comm, model, lambda params: optim.Momentum(params, lr=0.01, momentum=0.9)
    )
    loader = session.train_loader(train_set, batch_size=64, seed=0)
    straggler = Straggler(comm.rank, {comm.size - 1: args.factor})
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        stats, stopped = session.run_epoch(
            lambda: train_epoch(model, session.optimizer, loader, callbacks=[straggler])
        )
        records = session.finish_epoch(stats, stopped)
        accuracy = evaluate(model, test_loader, 10, comm=comm)["acc"]
        session.restore_local()
        if comm.rank == 0:
            summary = summarize_epoch(args.mode, records, sum(r.get("images", 0) for r in records))
            histogram = StalenessHistogram(summary["staleness"]["histogram"])
            print(
                f"epoch {epoch + 1}: test accuracy {100 * accuracy:.2f}%, "
                f"{summary['seconds']:.1f} s, {summary['images_per_s']:.0f} images/s"
            )
            print(
                f"  gradients per worker {summary['per_worker']['gradients']}, "
                f"gate wait per worker (s) " + ", ".join(f"{w:.2f}" for w in summary["gate_wait_s"])
            )
            print(
                f"  staleness: mean {histogram.mean:.2f}, max {histogram.max}, histogram "
                + ", ".join(f"{k}: {v}" for k, v in sorted(histogram.counts.items()))
            )
    session.close()


if __name__ == "__main__":
    main()
