"""How one epoch of training happens on this rank: alone or synchronously, or in a session.

Both engines give the epoch loop (``run.py``) the same face:
``train(epoch, progress) -> (stats, lr, records)``, ``schedulable`` (what an
LR schedule drives on this rank, or None), ``checkpoint_optimizer`` (whose
state the checkpoint keeps, or None), ``evaluated()`` (after the epoch's
evaluation and checkpoint) and ``close()``. A diverged epoch raises ``Diverged``.

- ``LocalEngine``: one process, or ``--dist sync``, where every rank trains
  the same model with its gradients averaged (``DistributedOptimizer``).
- ``SessionEngine``: ``--dist`` bsp, ssp:S, asp, avg:H and easgd, where each
  rank plays its role in a consistency session (``minidl.dist.consistency``):
  workers train, servers serve, and the model is evaluated as the consensus
  (the servers' weights, the EASGD center or the replicas' average).
"""
import sys

from .. import dist
from ..data import DataLoader
from ..dist.consistency import global_train_stats, make_session
from ..dist.ps import TrainingAborted
from ..dist.straggler import Straggler, parse_straggler
from ..dist.telemetry import summarize_epoch
from .loop import NonFiniteLossError, train_epoch
from .setup import augmentation, make_optimizer


class Diverged(RuntimeError):
    """The loss, the test loss or the weights stopped being finite numbers."""


def error_feedback(args):
    """``--error-feedback`` as the compressors take it: None (their default), True or False."""
    return {"auto": None, "on": True, "off": False}[args.error_feedback]


def make_straggler(args, comm, servers=0):
    """This rank's injected delays (None when there are none); checks the ranks named."""
    if not (args.straggler or args.jitter):
        return None
    for text in args.straggler:
        rank, _ = parse_straggler(text)
        if not servers <= rank < comm.size:
            raise ValueError(f"--straggler {text}: rank {rank} is not a worker; workers are "
                             f"ranks {servers}..{comm.size - 1}")
    return Straggler(comm.rank, args.straggler, args.jitter, seed=args.seed)


class LocalEngine:
    """One process, or ``--dist sync``: the whole model on every rank, one update per step."""

    progress_rank = 0  # the rank that shows a progress bar

    def __init__(self, args, comm, model, train_set):
        self.args, self.comm, self.model = args, comm, model
        self.plain = make_optimizer(args, model.parameters())
        self.schedulable = self.checkpoint_optimizer = self.optimizer = self.plain
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        self.straggler = make_straggler(args, comm) if comm is not None else None
        self.loader = DataLoader(train_set, args.batch_size, shuffle=True, seed=args.seed,
                                 drop_last=False, rank=rank, world_size=size,
                                 transform=augmentation(args))

    def distribute(self):
        """Under ``--dist sync``, wrap the optimizer (after a resume loaded its state)."""
        if self.comm is not None:
            args = self.args
            self.optimizer = dist.DistributedOptimizer(
                self.plain, self.comm, allreduce=args.allreduce, bucket_mb=args.bucket_mb,
                overlap=not args.no_overlap, model=self.model, compression=args.compress,
                error_feedback=error_feedback(args), seed=args.seed)

    def train(self, epoch, progress):
        self.loader.set_epoch(epoch - 1)
        lr = self.plain.lr
        try:
            stats = train_epoch(self.model, self.optimizer, self.loader, epoch, self.args.device,
                                progress=progress, comm=self.comm, straggler=self.straggler)
        except NonFiniteLossError as exc:
            raise Diverged(str(exc)) from None
        records = []
        if self.args.compress != "none":
            records.append(self.optimizer.compression_record(epoch))
        return stats, lr, records

    def evaluated(self):
        pass

    def close(self):
        pass


class SessionEngine:
    """bsp / ssp:S / asp / avg:H / easgd: this rank's role in a consistency session."""

    def __init__(self, args, comm, mode, model, train_set):
        self.args, self.comm, self.mode, self.model = args, comm, mode, model
        self.session = make_session(mode, comm, model, lambda params: make_optimizer(args, params),
                                    servers=args.servers, compression=args.compress,
                                    error_feedback=error_feedback(args),
                                    poll_interval=args.poll_interval, seed=args.seed,
                                    allreduce=args.allreduce)
        self.servers = self.session.layout.servers if mode.uses_server else 0
        self.straggler = make_straggler(args, comm, self.servers)
        self.schedulable = self.session.schedulable
        self.checkpoint_optimizer = None  # the state lives on the servers, sharded
        self.loader = self.session.train_loader(train_set, args.batch_size, args.seed,
                                                augmentation(args))

    @property
    def progress_rank(self):
        """The rank that shows a progress bar: the first worker."""
        return self.servers

    def distribute(self):
        """Nothing to wrap: the session's optimizers talk to the servers or peers themselves."""

    def train(self, epoch, progress):
        self.loader.set_epoch(epoch - 1)
        lr = self.schedulable.lr if self.schedulable else None

        def train():
            try:
                return train_epoch(self.model, self.session.optimizer, self.loader, epoch,
                                   self.args.device, progress=progress, straggler=self.straggler)
            except NonFiniteLossError as exc:
                print(f"minidl train (rank {self.comm.rank}): {exc}", file=sys.stderr, flush=True)
                raise TrainingAborted(str(exc)) from exc

        stats, stopped = self.session.run_epoch(train)
        records = self.session.finish_epoch(stats, stopped, lr)
        if records is None:
            raise Diverged(f"epoch {epoch}: a worker's loss was not finite; training stopped on "
                           "every rank. Lower --lr, or clip gradients")
        if self.comm.rank != 0:
            return stats, lr, []
        stats = global_train_stats(records)
        lr = next(r["lr"] for r in records if r.get("lr") is not None)
        summary = {"epoch": epoch, **summarize_epoch(self.mode.text, records, stats["images"])}
        return stats, lr, [summary]

    def evaluated(self):
        self.session.restore_local()

    def close(self):
        self.session.close()


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
