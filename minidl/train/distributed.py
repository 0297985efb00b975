"""``--dist`` for ``minidl train``: option checks, injected stragglers, the consistency sessions.

``--dist sync`` runs the ordinary loop with a ``DistributedOptimizer``
(``cli.run_train``); bsp, ssp:S, asp, avg:H and easgd run here, each rank in
its role of a consistency session (``minidl.dist.consistency``).
"""
import argparse
import os
import sys

from ..data import DataLoader
from ..dist.compression import make_compressor
from ..dist.consistency import global_train_stats, make_session, parse_dist_mode
from ..dist.ps import TrainingAborted
from ..dist.straggler import Straggler, parse_straggler
from ..dist.telemetry import summarize_epoch
from .loop import NonFiniteLossError, evaluate, train_epoch
from .metrics import append_metrics
from .setup import (augmentation, default_run_dir, make_optimizer, make_scheduler,
                    prepare_run_dir, report_epoch)


def argument_type(parse):
    """An argparse type that keeps the text and turns ``parse``'s ValueError into a usage error."""
    def check(text):
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return check


dist_mode = argument_type(parse_dist_mode)
compression = argument_type(make_compressor)
straggler = argument_type(parse_straggler)


def mpiexec_ranks():
    """How many ranks mpiexec started (from the launcher's environment), 1 outside mpiexec."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def check_dist_options(args, mode):
    """Refuse options that do not apply to ``mode`` (None: no --dist), naming the fix."""
    what = f"--dist {mode.text}" if mode is not None else "a run without --dist"
    if args.servers != 1 and (mode is None or not mode.uses_server):
        raise SystemExit(f"minidl train: --servers applies to --dist bsp, ssp:S, asp and easgd, "
                         f"not to {what}")
    if args.servers > 1 and args.clip_grad_norm is not None:
        raise SystemExit("minidl train: --clip-grad-norm needs the whole gradient's norm, which "
                         "no shard server sees; use --servers 1")
    if args.compress != "none" and (mode is None or mode.name in ("avg", "easgd")):
        raise SystemExit(f"minidl train: --compress applies to --dist sync, bsp, ssp:S and asp, "
                         f"not to {what}")
    if args.error_feedback != "auto" and args.compress == "none":
        raise SystemExit("minidl train: --error-feedback needs --compress")
    if (args.straggler or args.jitter) and mode is None:
        raise SystemExit("minidl train: --straggler and --jitter slow down ranks of a --dist run")
    if args.trace and mode is not None and mode.name != "sync":
        raise SystemExit(f"minidl train: --trace records --dist sync or single-process runs, "
                         f"not {what}")
    if args.resume and mode is not None and mode.name != "sync":
        raise SystemExit(f"minidl train: --resume works with --dist sync or without --dist, "
                         f"not with {what}")


def error_feedback(args):
    return {"auto": None, "on": True, "off": False}[args.error_feedback]


def make_straggler(args, comm, servers=0):
    """This rank's injected delays (None when there are none); checks the ranks named."""
    if not (args.straggler or args.jitter):
        return None
    for text in args.straggler:
        rank, _ = parse_straggler(text)
        if not servers <= rank < comm.size:
            raise SystemExit(f"minidl train: --straggler {text}: rank {rank} is not a worker; "
                             f"workers are ranks {servers}..{comm.size - 1}")
    return Straggler(comm.rank, args.straggler, args.jitter, seed=args.seed)


def train_with_session(args, mode, comm, model, train_set, test_set):
    """bsp / ssp:S / asp / avg:H / easgd: every rank runs its role in a consistency session.

    Rank 0 writes the outputs: per epoch an ``"epoch"`` record (global training
    loss and accuracy over the workers, test metrics of the consensus model:
    the servers' weights, the EASGD center or the replicas' average) and a
    ``"dist"`` record (staleness, waiting, throughput, bytes: see
    ``minidl.dist.telemetry``); the checkpoint holds the consensus model.
    """
    session = make_session(mode, comm, model, lambda params: make_optimizer(args, params),
                           servers=args.servers, compression=args.compress,
                           error_feedback=error_feedback(args), poll_interval=args.poll_interval,
                           seed=args.seed, allreduce=args.allreduce)
    servers = session.layout.servers if mode.uses_server else 0
    straggler = make_straggler(args, comm, servers)
    scheduler = make_scheduler(args, session.schedulable) if session.schedulable else None
    out = comm.bcast_object(args.out or default_run_dir(args))
    train_loader = session.train_loader(train_set, args.batch_size, args.seed,
                                        augmentation(args))
    test_loader = DataLoader(test_set, args.test_batch_size, rank=comm.rank, world_size=comm.size)
    paths = prepare_run_dir(args, out, comm.size) if comm.rank == 0 else None
    progress = comm.rank == servers and not args.no_progress
    for epoch in range(1, args.epochs + 1):
        train_loader.set_epoch(epoch - 1)
        lr = session.schedulable.lr if session.schedulable else None

        def train():
            try:
                return train_epoch(model, session.optimizer, train_loader, epoch, args.device,
                                   progress=progress, straggler=straggler)
            except NonFiniteLossError as exc:
                print(f"minidl train (rank {comm.rank}): {exc}", file=sys.stderr, flush=True)
                raise TrainingAborted(str(exc)) from exc

        stats, stopped = session.run_epoch(train)
        records = session.finish_epoch(stats, stopped, lr)
        if records is None:
            if comm.rank == 0:
                print("minidl train: training stopped: a worker's loss was not finite",
                      file=sys.stderr)
            session.close()
            return 3
        result = evaluate(model, test_loader, len(train_set.classes), args.device, comm=comm)
        if scheduler is not None:
            scheduler.step()
        if comm.rank == 0:
            stats = global_train_stats(records)
            lr = next(r["lr"] for r in records if r.get("lr") is not None)
            report_epoch(paths, args, epoch, lr, stats, result, model, None, None)
            summary = {"epoch": epoch, **summarize_epoch(mode.text, records, stats["images"])}
            append_metrics(paths["metrics.jsonl"], summary)
            print(format_summary(summary), flush=True)
        session.restore_local()
    session.close()
    if comm.rank == 0:
        print(f"test accuracy {100 * result['acc']:.2f}% after epoch {args.epochs}; "
              f"run directory: {out}")
    return 0


def format_summary(summary):
    """One line of a ``"dist"`` record for the console."""
    line = (f"  {summary['mode']}: {summary['gradients_per_s']:.1f} gradients/s, "
            f"{summary['updates_per_s']:.1f} updates/s, "
            f"{summary['worker_bytes_sent'] / 2**20:.1f} MiB pushed")
    if "staleness" in summary:
        st = summary["staleness"]
        line += (f", staleness mean {st['mean']:.2f} max {st['max']}, gate wait "
                 + " ".join(f"{w:.1f}" for w in summary["gate_wait_s"]) + " s")
    return line + ", waiting " + " ".join(f"{w:.1f}" for w in summary["per_worker"]["wait_s"]) + " s"
