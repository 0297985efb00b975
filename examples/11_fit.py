"""A training run from a script of a few lines: what ``minidl train`` does, as a Python API.

    python examples/11_fit.py                        # one process
    python examples/11_fit.py --workers 2            # data parallel over 2 local processes
    mpiexec -n 2 python examples/11_fit.py --dist    # every rank of an MPI job (sync SGD)

The configuration is typed (``md.train.TrainConfig``, ``md.dist.DistConfig``);
``fit`` trains, writes the run folder (checkpoint, metrics, plot) and
returns the last evaluation.
"""

import argparse

import minidl as md


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--dist", action="store_true", help="under mpiexec: sync over its ranks")
    parser.add_argument("--subset", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per process under mpiexec")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    config = md.train.TrainConfig(
        model="lenet5",
        optimizer="adam",
        lr=0.002,
        epochs=args.epochs,
        batch_size=args.batch_size,
        subset=args.subset,
        out=args.out,
        progress=False,
    )
    if args.workers > 1 or args.dist:
        options = md.dist.DistConfig(mode=md.dist.DistMode("sync"), allreduce="ring")
        md.dist.fit(config, options, workers=args.workers)
    else:
        md.train.fit(config)


if __name__ == "__main__":
    main()
