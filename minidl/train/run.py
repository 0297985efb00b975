"""One training run in every layout: what ``fit`` and ``verify`` set up around the loop.

``TrainingRun`` holds the run's data and the serial model (as one process builds it, with the
checkpoint's weights when it resumes); a layout turns the model into what this rank trains
(``loop.Training``: the local one is ``local_training``, the distributed ones come from
``minidl.dist``), and from ``begin`` on the run holds no more of the model than that.
``loop.train_epochs`` runs the epochs. Per epoch the run evaluates the model on the test set
(globally, over every rank's share), checks that nothing diverged, steps the LR schedule and
hands the epoch to ``record_epoch``, which rank 0 prints; the application's run
(``minidl_app.run``) also writes it into the run folder.

A diverged epoch (a loss, the test loss or a weight that is NaN or inf) raises ``Diverged``
before the epoch is recorded. Under MPI every rank reaches the same verdict (the test
metrics are global and the replicas are equal), so all stop together.
"""

import math
import os
import socket

import numpy as np

from .. import conv
from .. import functional as F
from .. import random as md_random
from ..backend import get_array_module, limit_threads
from ..data import DataLoader
from ..optim import ReduceOnPlateau
from ..parallel import default_num_threads
from ..perf.threads import fastest_threads
from .callbacks import Diverged, SampleKeys, StopOnNonFiniteLoss
from .checkpoint import load_checkpoint
from .config import (
    TrainConfig,
    augmentation,
    build_model,
    default_run_dir,
    load_datasets,
    make_optimizer,
    make_scheduler,
    option,
)
from .loop import Training, batch_inputs, evaluate
from .memory_record import MemoryRecord

# a test loss this many times the first epoch's has diverged though finite: a cross-entropy that
# starts near ln(classes) and grows a million-fold means logits apart by millions, no model
DIVERGED_GROWTH = 1e6


def divergence(result, model, first_loss=None):
    """Why the epoch's outcome is unusable, or None: a test loss that is not finite or grew
    beyond ``DIVERGED_GROWTH`` times ``first_loss`` (the first epoch's), or weights of
    ``model`` (this rank's) not finite."""
    if not math.isfinite(result["loss"]):
        return f"the test loss is {result['loss']}"
    if first_loss is not None and result["loss"] > DIVERGED_GROWTH * first_loss:
        return (
            f"the test loss is {result['loss']:.3g}, over {DIVERGED_GROWTH:g} times the first "
            f"epoch's ({first_loss:.3g})"
        )
    for name, p in model.named_parameters():
        if not bool(get_array_module(p.data).isfinite(p.data).all()):
            return f"the weights of {name} hold NaN or inf"
    return None


def epoch_line(epoch, epochs, stats, result):
    return (
        f"epoch {epoch}/{epochs}: train loss {stats['loss']:.4f} "
        f"acc {100 * stats['acc']:.2f}% | test loss {result['loss']:.4f} "
        f"acc {100 * result['acc']:.2f}% | {stats['seconds']:.1f} s, "
        f"{stats['images_per_s']:.0f} img/s"
    )


class TrainingRun:
    """Everything one rank needs for the run ``config`` describes; a context manager.

    ``comm`` is the run's communicator (None in a process alone); ``resume`` the path of a
    checkpoint to continue from: its weights are in ``model`` already, its optimizer, schedule
    and random state are put in place by ``begin``. Leaving the ``with`` block ends the
    callbacks, however the run ends; MPI's report that a peer's process died ends the job,
    naming it (``Communicator.abort_if_peer_failed``). ``option(field)`` names an option in
    what the run prints (``str``: the field; the command line passes its flags). ``out`` is
    the run's folder (``--trace`` writes there).
    """

    progress = None  # ``progress(where)``: told of each message a server serves (a watchdog)

    def __init__(self, config: TrainConfig, comm=None, resume=None, option=str):
        self.config, self.comm, self.resume, self.option = config.check(), comm, resume, option
        self.rank, self.size = (comm.rank, comm.size) if comm is not None else (0, 1)
        resumed_dir = os.path.dirname(os.path.abspath(resume)) if resume else None
        self.out = config.out or resumed_dir or default_run_dir(config)
        if comm is not None:
            self.out = comm.bcast_object(self.out)
        self.training = self.tracing = self.scheduler = self._first_loss = None
        self.start_epoch = 0
        self._prepare()

    def _prepare(self):
        config = self.config
        threads, why = self._thread_count()
        self._threads = limit_threads(threads, blas=1)  # kept alive for the run
        conv.configure(enabled=not config.deterministic)
        self.checkpoint = self._checkpoint(self.resume) if self.resume else None
        md_random.manual_seed(config.seed)
        self.train_set, self.test_set = load_datasets(config, self.comm)
        self.model = build_model(config, self.train_set)
        if self.checkpoint is not None:
            self.model.load_state_dict(self.checkpoint.model_state)
        if config.threads is None and threads > 1 and config.dataset != "folder":
            threads, timed = fastest_threads(self._timed_step(), (1, threads))
            self._threads = limit_threads(threads, blas=1)
            why += "; a step took " + ", ".join(
                f"{seconds * 1e3:.1f} ms on {n}" for n, seconds in timed.items()
            )
        if self.rank == 0 and config.threads is None:
            print(f"threads: {threads} per process ({why}; {self.option('threads')} N sets it)")

    def _checkpoint(self, path):
        """The checkpoint at ``path`` the run continues from."""
        return load_checkpoint(path)

    def _timed_step(self):
        """A forward and backward of the model on the first batch, in evaluation mode (no
        running statistic, batch count or random stream moves), leaving no gradient."""
        model, config = self.model, self.config
        x, y = next(iter(self.loader(self.train_set, config.batch_size)))

        def step():
            model.eval()
            try:
                F.cross_entropy(model(batch_inputs(model, x, config.device)), y).backward()
            finally:
                model.train()
                for p in model.parameters():
                    p.grad = None

        return step

    def loader(self, dataset, batch_size, rank=0, world_size=1, train=False):
        """A ``DataLoader`` of ``dataset`` for rank ``rank`` of ``world_size`` (``train``:
        shuffled by the seed, with the run's augmentation)."""
        config = self.config
        return DataLoader(
            dataset,
            batch_size,
            shuffle=train,
            seed=config.seed,
            rank=rank,
            world_size=world_size,
            transform=augmentation(config) if train else None,
            workers=config.data_workers,
            skip_unreadable=config.skip_unreadable,
        )

    def local_training(self):
        """One process, the whole model, one update per step."""
        loader = self.loader(self.train_set, self.config.batch_size, train=True)
        optimizer = make_optimizer(self.config, self.model.parameters())
        callbacks = [StopOnNonFiniteLoss(), SampleKeys(loader), MemoryRecord(self.model, optimizer)]
        return Training(self.model, optimizer, loader, callbacks=callbacks, schedulable=optimizer)

    def begin(self, training):
        """Put the checkpoint's optimizer, schedule and random state in place for ``training``."""
        self.training, self.model = training, None  # the layout holds this rank's share
        replicas = training.placement.replicas if training.placement else self.comm
        rank, size = (replicas.rank, replicas.size) if replicas is not None else (0, 1)
        self.test_loader = self.loader(self.test_set, self.config.test_batch_size, rank, size)
        schedulable = training.schedulable
        self.scheduler = make_scheduler(self.config, schedulable) if schedulable else None
        self.start_epoch = 0
        if self.checkpoint is not None:
            self.start_epoch = self._load(self.checkpoint)
            self.checkpoint.model_state = self.checkpoint.optimizer_state = None  # in place now
        self.tracing = self._tracing() if self.config.trace else None

    def _load(self, checkpoint):
        """Put the checkpoint's optimizer, schedule and random state in place; its epoch."""
        training, state = self.training, checkpoint.optimizer_state
        if state is not None and training.checkpoints_optimizer and training.optimizer:
            placement = training.placement
            training.optimizer.load_state_dict(
                placement.scatter_state(state) if placement else state
            )
        if self.scheduler is not None and checkpoint.meta.get("scheduler"):
            self.scheduler.load_state_dict(checkpoint.meta["scheduler"])
        md_random.set_state(checkpoint.meta["rng"])
        return int(checkpoint.meta["epoch"])

    def _tracing(self):
        """The ``--trace`` recorder: the layout's own (pipelines), else per-layer compute and
        the step on every rank (``perf.training_trace``)."""
        training = self.training
        if training.timeline is not None:
            return training.timeline().start()
        from ..perf.training_trace import TrainingTrace

        return TrainingTrace(
            training.model, training.optimizer, self.rank, self.config.device, comm=self.comm
        ).start()

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if exc is not None and self.comm is not None:  # a dead peer: say which
            self.comm.abort_if_peer_failed(exc, self.option)
        for callback in self.training.callbacks if self.training else ():
            callback.close()

    def watchdogs(self, options):
        """Callbacks that end a distributed job hung under ``options`` (the application's run
        has one; a library run none)."""
        return []

    def _thread_count(self):
        """(``--threads``, else the cores this process may use shared among this host's ranks,
        less the threads decoding a folder's images, which run beside the step; why)."""
        config = self.config
        if config.threads is not None:
            return config.threads, "--threads"
        cores = default_num_threads()
        local = 1
        if self.comm is not None and self.size > 1:  # collective: every rank starts a run
            host = socket.gethostname()
            local = self.comm.allgather_object(host).count(host)
        decoding = config.data_workers if config.dataset == "folder" else 0
        threads = max(1, cores // local - decoding)
        return threads, f"{cores} cores, {local} rank(s) on this host, {decoding} decoding"

    def lr(self, training):
        """The learning rate this epoch trains with."""
        schedulable = training.schedulable
        return schedulable.lr if schedulable is not None else self.config.lr

    def evaluate(self, training):
        """The model's loss and accuracy on the test set, over every replica's share (a
        layout's shares evaluate together: collective)."""
        placement = training.placement
        result = evaluate(
            placement.evaluated if placement else training.model,
            self.test_loader,
            len(self.train_set.classes),
            self.config.device,
            comm=placement.replicas if placement else self.comm,
            callbacks=training.callbacks,
        )
        if self.config.skip_unreadable:
            result["skipped"] = self._skipped(training)
        return result

    def end_epoch(self, epoch, lr, stats, result, records, training):
        """Stop on divergence, step the LR schedule, then record the epoch."""
        problem = self._divergence(result, training)
        if problem is not None:
            raise Diverged(
                f"epoch {epoch}: {problem}; training diverged. Lower {option('lr')}, or "
                f"clip gradients ({option('clip_grad_norm')})"
            )
        if self._first_loss is None:
            self._first_loss = result["loss"]
        if isinstance(self.scheduler, ReduceOnPlateau):
            self.scheduler.step(1.0 - result["acc"])  # the validation top-1 error
        elif self.scheduler is not None:
            self.scheduler.step()
        self.record_epoch(epoch, lr, stats, result, records)

    def _divergence(self, result, training):
        """``divergence`` of this epoch, agreed by every rank (each checks its own weights)."""
        placement = training.placement
        problem = divergence(
            result, placement.evaluated if placement else training.model, self._first_loss
        )
        if self.comm is not None and placement is not None:
            problem = next((p for p in self.comm.allgather_object(problem) if p), None)
        return problem

    def finish(self, result):
        """After the last epoch: write the trace, say how the run ended; returns ``result``."""
        if self.tracing is not None:  # perf: every rank writes its part, rank 0 merges them
            trace_path = self.tracing.finish(self.out, self.comm)
            if self.rank == 0:
                print(f"timeline: {trace_path} (open it in https://ui.perfetto.dev)")
        if self.rank == 0:
            print(self.final_line(result))
        return result

    def final_line(self, result):
        if result is None:
            return (
                f"nothing to do: the checkpoint is already at epoch {self.start_epoch}; "
                f"raise {self.option('epochs')} to train further"
            )
        return f"test accuracy {100 * result['acc']:.2f}% after epoch {self.config.epochs}"

    def _skipped(self, training):
        """Unreadable images left out so far (train and test), over every rank."""
        loaders = (training.loader, self.test_loader)
        count = sum(len(getattr(loader, "skipped", ())) for loader in loaders)
        if self.comm is not None:
            total = np.array([count], dtype=np.float64)
            count = int(self.comm.allreduce(total, op="sum")[0])
        return count

    def record_epoch(self, epoch, lr, stats, result, records):
        """Rank 0 prints the epoch (collective: a subclass may gather what it keeps)."""
        if self.rank != 0:
            return
        print(epoch_line(epoch, self.config.epochs, stats, result), flush=True)
        if result.get("skipped"):
            print(f"{result['skipped']} unreadable images left out so far", flush=True)
        for record in records:
            if record.get("kind") == "dist":
                print(self.training.describe(record), flush=True)
