"""``verify``: does a layout train as one process does, and where does it first differ?

Every rank trains K steps of the layout, as ``fit`` would, in float64; rank 0 also trains one
process on the same batches (the replicas' shares joined: ``batch_size x dp`` images a
step), from the same initial weights. After each step the layout's tensors are assembled
to the serial model's names and shapes and compared with the process's:

- each layer's output (forward order): the replicas' rows, a pipeline's micro-batches and
  tensor or spatial blocks joined along the axis they split;
- each parameter's gradient (backward order), made whole as a checkpoint makes weights;
- each weight and each optimizer state after the update (the checkpoint's own streams).

A tensor differs when max|a - b| > ``TOLERANCE`` x max|b|. Reordering a float64 sum moves
its last bits (relative error about n eps for n terms, eps = 2^-52), and K updates amplify
that; 2^20 eps (2.3e-10) leaves that noise far below any mistake of a layout, which moves
a value by 1e-3 or more (Ben-Nun & Hoefler 2019, §5: every synchronous layout is the
serial SGD step). A tensor that is zero but for rounding (a bias before batch norm) is
measured against ``SMALL`` x the largest tensor of its kind in the step instead, the size
of the terms its sums ran over.
"""

import dataclasses
from itertools import islice

import numpy as np

from .. import functional as F
from .. import random as md_random
from ..autograd import Tensor
from ..backend import to_device, to_numpy
from ..layers import leaves
from ..recompute import is_recomputing
from ..train.callbacks import Callback, SampleKeys
from ..train.config import ConfigError, TrainConfig, build_model, make_optimizer, option
from ..train.loop import train_epoch
from ..train.run import TrainingRun
from .comm import init
from .config import DistConfig, layout_label
from .grid import Grid, GridShape
from .parallelize import parallelize
from .pipeline.schedules import ASYNCHRONOUS
from .zero import ZeroOptimizer

TOLERANCE = 2**20 * np.finfo(np.float64).eps
SMALL = 2**-10  # below this fraction of the largest tensor of its kind, a tensor is rounding
KINDS = ("output", "gradient", "weight", "state")


@dataclasses.dataclass
class Difference:
    """A tensor of step ``step`` whose layout value is off by ``max_abs`` (``max_rel`` of the
    process's largest magnitude); ``kind`` is one of ``KINDS``."""

    step: int
    kind: str
    name: str
    max_abs: float
    max_rel: float
    note: str = ""

    def __str__(self):
        what = {"output": "output of layer", "state": "optimizer state"}.get(self.kind, self.kind)
        if self.note:
            return f"step {self.step}: {what} {self.name}: {self.note}"
        return (
            f"step {self.step}: {what} {self.name}: max abs error {self.max_abs:.3g}, "
            f"max rel error {self.max_rel:.3g}"
        )


@dataclasses.dataclass
class Verdict:
    """What ``verify`` found: ``differences`` in the order of the module doc, so
    ``differences[0]`` is the first; ``compared`` tensors a step."""

    layout: str
    steps: int
    compared: int
    worst: float
    differences: list

    @property
    def equal(self):
        return not self.differences

    def summary(self):
        if self.equal:
            return (
                f"verify: {self.layout} equals one process over {self.steps} steps "
                f"({self.compared} tensors a step; largest relative error {self.worst:.2g}, "
                f"tolerance {TOLERANCE:.2g})"
            )
        return (
            f"verify: {len(self.differences)} tensors of {self.layout} differ from one "
            f"process; the first: {self.differences[0]}"
        )


def verify(
    model="lenet5",
    *,
    steps=3,
    config: TrainConfig | None = None,
    options: DistConfig | None = None,
    plan=None,
    comm=None,
    **fields,
) -> "Verdict":
    """Train ``steps`` steps of a layout and of one process and compare them (module doc);
    collective: call it on every rank, which all return the ``Verdict``.

    ``model``: a zoo name, or a function returning a new model (called after seeding, so
    every call gives the same weights). ``config``/``options``: the run's (``TrainConfig``,
    ``DistConfig``); ``fields`` set any of their fields, e.g. ``grid="dp=2,tp=2"``,
    ``zero=2``, ``optimizer="adam"``. ``plan``: tensor parallelism's words per layer.
    """
    config, options = _configs(model, config, options, fields)
    comm = comm if comm is not None else init()
    comm.auto = "rule"  # the same allreduce algorithm on every step
    if options.grid is not None:
        options.grid.check_fits(comm.size)
    with TrainingRun(config, comm) as run:
        if callable(model):
            run.model = _factory_model(model, config)
        reference = Reference(run, options, model) if comm.rank == 0 else None
        names = {id(layer): name for name, layer in leaves(run.model)}
        params = [name for name, _ in run.model.named_parameters()]
        training = parallelize(run, options, plan)
        grid = options.grid
        coords = Grid(comm, **dataclasses.asdict(grid)).coords if grid else {"dp": comm.rank}
        differences = []
        layout = Layout(
            training,
            comm,
            coords,
            names,
            params,
            lambda layout: _compare(layout, reference, differences),
        )
        training.loader.set_epoch(0)
        for callback in training.callbacks:
            callback.before_epoch(1)
        try:
            train_epoch(
                training.model,
                training.optimizer,
                islice(training.loader, steps),
                device=config.device,
                comm=training.comm,
                callbacks=[*training.callbacks, layout],
                step=training.step,
            )
        finally:
            for callback in training.callbacks:
                callback.close()
    verdict = None
    if reference is not None:
        text = layout_label(options.record(), comm.size)
        verdict = Verdict(text, steps, reference.compared, reference.worst, differences)
    return comm.bcast_object(verdict)


def _configs(model, config, options, fields):
    """The run's ``TrainConfig`` (float64) and checked ``DistConfig``; refuses what is not
    meant to equal one process."""
    config = config or TrainConfig(progress=False, subset=512)
    options = options or DistConfig()
    ours = {k: v for k, v in fields.items() if k in TrainConfig.__dataclass_fields__}
    theirs = {k: v for k, v in fields.items() if k in DistConfig.__dataclass_fields__}
    unknown = set(fields) - set(ours) - set(theirs)
    if unknown:
        raise TypeError(f"verify: unknown option(s) {', '.join(sorted(unknown))}")
    if isinstance(theirs.get("grid"), str):
        theirs["grid"] = GridShape.parse(theirs["grid"])
    config = dataclasses.replace(
        config, **ours, model=model if isinstance(model, str) else config.model, dtype="float64"
    )
    options = dataclasses.replace(options, **theirs)
    if options.mode.name != "sync":
        raise ConfigError(
            f"verify: {option('dist')} {options.mode.text} is not meant to equal one process "
            "(its updates read stale or averaged weights); verify checks sync layouts"
        )
    if options.pipelined and options.schedule in ASYNCHRONOUS:
        raise ConfigError(
            f"verify: {option('schedule')} {options.schedule} updates after each micro-batch, "
            "which one process does not; verify the synchronous schedules"
        )
    if options.compressed:
        raise ConfigError(
            f"verify: {option('compress')} changes the gradients on purpose; verify without it"
        )
    return config, options.check(config)


def _factory_model(make_model, config):
    """``make_model()`` seeded as a run's model is, its dropouts numbered, in the run's dtype."""
    md_random.manual_seed(config.seed)
    return md_random.number_streams(make_model()).to(config.dtype).to(config.device)


class Recorder:
    """Wraps the ``forward`` of named layers to keep each call's output (not the calls that
    recompute a segment in backward): ``calls[name]`` is the list of this step's outputs."""

    def __init__(self, named_layers):
        self.calls = {}
        for name, layer in named_layers:
            layer.forward = self._recording(name, layer.forward)

    def _recording(self, name, forward):
        def recorded(*args, **kwargs):
            out = forward(*args, **kwargs)
            if not is_recomputing() and isinstance(out, Tensor):
                self.calls.setdefault(name, []).append(to_numpy(out.data).copy())
            return out

        return recorded


class Reference:
    """One process on the whole batch of each step (rank 0): its model built as the run's,
    the layout's loader with every replica's share, the same update rule."""

    def __init__(self, run, options, model):
        config = run.config
        if callable(model):
            self.model = _factory_model(model, config)
        else:
            md_random.manual_seed(config.seed)
            self.model = build_model(config, run.train_set)
        replicas = options.grid.dp if options.grid else run.comm.size
        self.loader = run.loader(run.train_set, config.batch_size * replicas, train=True)
        self.loader.set_epoch(0)
        self.batches = iter(self.loader)
        self.optimizer = make_optimizer(config, self.model.parameters())
        self.keys = SampleKeys(self.loader)
        self.recorder = Recorder(leaves(self.model))
        self.order = [name for name, _ in leaves(self.model)]
        self.device, self.compared, self.worst = config.device, 0, 0.0
        self.draws = md_random.snapshot()  # its own random stream: rank 0's layout keeps its

    def step(self, index):
        """Train one step; returns {kind: {name: array}} and the batch's size."""
        layout, _ = md_random.snapshot(), md_random.restore(self.draws)
        try:
            return self._step(index)
        finally:
            self.draws, _ = md_random.snapshot(), md_random.restore(layout)

    def _step(self, index):
        x, y = next(self.batches)
        self.recorder.calls = {}
        self.keys.before_step(index, len(y))
        self.optimizer.zero_grad()
        logits = self.model(Tensor(to_device(x, self.device).astype(np.float64)))
        F.cross_entropy(logits, y).backward()
        named = list(self.model.named_parameters())
        grads = {name: to_numpy(p.grad) for name, p in reversed(named) if p.grad is not None}
        self.optimizer.step()
        self.keys.after_step("")
        state = self.optimizer.state_dict()["state"]
        return {
            "output": _flat(self.recorder.calls, self.order),
            "gradient": grads,
            "weight": {k: to_numpy(v) for k, v in self.model.state_dict().items()},
            "state": _states([name for name, _ in named], state),
        }, len(y)


def _states(names, states):
    """{"name:key": array} of the per-parameter optimizer ``states`` (one dict each)."""
    return {
        f"{name}:{key}": np.asarray(to_numpy(value))
        for name, state in zip(names, states, strict=True)
        for key, value in state.items()
        if np.ndim(value)
    }


class Layout(Callback):
    """The layout's side: records this rank's layer outputs during the step and, after it,
    assembles outputs, gradients, weights and optimizer state on rank 0 (collective)."""

    def __init__(self, training, comm, coords, names, params, on_step):
        self.training, self.comm, self.coords = training, comm, coords
        self.params, self.on_step, self.index = params, on_step, 0
        serial = set(names.values())
        mine = [
            (_serial_name(path, layer, names, serial), layer)
            for path, layer in leaves(training.model)
        ]
        self.recorder = Recorder([(name, layer) for name, layer in mine if name is not None])
        optimizer = training.optimizer
        self.zero = optimizer if isinstance(optimizer, ZeroOptimizer) else None
        self.grads, inner = {}, training.schedulable
        if inner is not None:  # the gradients the update rule reads, before a step drops them
            update = inner.step

            def step():
                self.grads = {
                    id(p): p.grad if p.grad is None else p.grad.copy() for p in inner.params
                }
                update()

            inner.step = step

    def before_step(self, step, batch_size):
        self.index, self.recorder.calls = step, {}

    def after_step(self, where):
        self.on_step(self)

    def outputs(self):
        """[(coords, {name: [calls]})] of every rank, on rank 0 (collective)."""
        everyone = self.comm.allgather_object((self.coords, self.recorder.calls))
        return everyone if self.comm.rank == 0 else None

    def gradients(self):
        """{name: gradient} of the serial parameters, on rank 0 (collective)."""
        training, model, grads = self.training, self.training.model, self.grads
        if self.zero is not None:
            named = {id(p): name for name, p in model.named_parameters()}
            blocks = [grads[id(piece)] for piece in self.zero.pieces]
            return {
                named[id(p)]: to_numpy(self.zero.whole_array(p, blocks)) for p in self.zero.full
            }
        if training.placement is None:
            return {
                name: to_numpy(grads[id(p)])
                for name, p in model.named_parameters()
                if grads.get(id(p)) is not None
            }
        params = list(model.parameters())
        kept = [p.data for p in params]
        for p in params:  # the checkpoint's stream makes blocks whole: let it carry gradients
            grad = grads.get(id(p))
            p.data = grad if grad is not None else np.zeros_like(p.data)
        try:
            items = list(training.placement.model_state())
        finally:
            for p, data in zip(params, kept, strict=True):
                p.data = data
        if self.comm.rank != 0:
            return None
        return {name: to_numpy(value) for name, value in items if name in self.params}

    def weights(self):
        """{name: array} of the serial model's state after the update, on rank 0."""
        training = self.training
        if self.zero is not None:
            self.zero.gather_model()
        try:
            placement = training.placement
            items = placement.model_state() if placement else training.model.state_dict().items()
            items = [(name, value if value is None else to_numpy(value)) for name, value in items]
        finally:
            if self.zero is not None:
                self.zero.release_model()
        return dict(items) if self.comm.rank == 0 else None

    def states(self):
        """{"name:key": array} of the serial optimizer's state, on rank 0."""
        training = self.training
        state = training.optimizer.state_dict()
        if training.placement:
            state = training.placement.optimizer_state(state)
        states = list(state["state"])
        return _states(self.params, states) if self.comm.rank == 0 else None


def _serial_name(path, layer, names, serial):
    """The serial model's name of this rank's ``layer``: the same object's, else the longest
    dotted suffix of its path that names a serial layer (a block or a row split of it)."""
    if id(layer) in names:
        return names[id(layer)]
    parts = path.split(".")
    suffixes = (".".join(parts[i:]) for i in range(len(parts)))
    return next((suffix for suffix in suffixes if suffix in serial), None)


def _compare(layout, reference, differences):
    """The step just taken by the layout, and the same by one process, compared on rank 0
    (every rank takes part)."""
    step = layout.index
    found = layout.outputs(), layout.gradients(), layout.weights(), layout.states()
    if reference is None:
        return
    expected, rows = reference.step(step)
    outputs, gradients, weights, states = found
    replicas = 1 + max(coords.get("dp", 0) for coords, _ in outputs)
    shares = [len(part) for part in np.array_split(np.arange(rows), replicas)]
    got = {
        "output": _assemble(outputs, reference.recorder.calls, reference.order, shares),
        "gradient": gradients,
        "weight": weights,
        "state": states,
    }
    compared = 0
    for kind in KINDS:
        floor = SMALL * max(map(_scale, expected[kind].values()), default=0.0)
        for name, want in expected[kind].items():
            compared += 1
            have, scale = got[kind].get(name), max(_scale(want), floor)
            if have is None or isinstance(have, str) or have.shape != want.shape:
                note = have or "missing from the layout"
                if not isinstance(have, str) and have is not None:
                    note = f"shape {have.shape}, one process's {want.shape}"
                differences.append(Difference(step, kind, name, np.inf, np.inf, note))
                continue
            error = float(np.max(np.abs(have - want), initial=0.0))
            if error <= TOLERANCE * scale:
                reference.worst = max(reference.worst, error / scale)
            else:
                differences.append(Difference(step, kind, name, error, error / scale))
    reference.compared = compared


def _scale(array):
    """max |array| (1 for an all-zero array)."""
    return float(np.max(np.abs(array), initial=0.0)) or 1.0


def _key(name, call, calls):
    return name if calls == 1 else f"{name} (call {call + 1})"


def _flat(calls, order):
    """{key: output} of ``{name: [calls]}``, in forward order."""
    return {
        _key(name, j, len(calls[name])): out
        for name in order
        if name in calls
        for j, out in enumerate(calls[name])
    }


def _assemble(outputs, expected, order, shares):
    """{key: the layout's output, or a note}: each rank's micro-batches joined, then its
    tensor or spatial blocks (``_join_blocks``), then the replicas' rows."""
    got = {}
    for name in order:
        if name not in expected:
            continue
        calls = len(expected[name])
        joined = [{} for _ in range(calls)]  # call -> {dp: {(spatial, tp): array}}
        for coords, recorded in outputs:
            mine = recorded.get(name)
            if not mine or len(mine) % calls:
                continue
            batches = len(mine) // calls  # a pipeline's micro-batches
            for j in range(calls):
                piece = np.concatenate([mine[m * calls + j] for m in range(batches)])
                where = (coords.get("spatial", 0), coords.get("tp", 0))
                joined[j].setdefault(coords.get("dp", 0), {})[where] = piece
        for j in range(calls):
            shape = expected[name][j].shape
            got[_key(name, j, calls)] = _join_replicas(joined[j], shape, shares)
    return got


def _join_replicas(replicas, shape, shares):
    parts = []
    for r, rows in enumerate(shares):
        if rows == 0:
            continue
        if r not in replicas:
            return f"no rank of replica {r} computed it"
        part = _join_blocks(replicas[r], (rows, *shape[1:]))
        if isinstance(part, str):
            return part
        parts.append(part)
    return np.concatenate(parts)


def _join_blocks(pieces, target):
    """One array of the ``(spatial, tp) -> block`` ``pieces`` of one replica: split along one
    grid axis (joined along the array axis whose size differs from ``target``'s) and the
    same on every rank of the other."""
    arrays = list(pieces.values())
    if arrays[0].shape == target and all(np.array_equal(a, arrays[0]) for a in arrays):
        return arrays[0]
    for axis in (0, 1):  # split over spatial (rows), then over tp
        lines = {}
        for where, block in sorted(pieces.items()):
            lines.setdefault(where[axis], []).append(block)
        if not all(all(np.array_equal(b, line[0]) for b in line) for line in lines.values()):
            continue
        blocks = [line[0] for _, line in sorted(lines.items())]
        joined = _concat(blocks, target)
        if joined is not None:
            return joined
    return "its blocks do not join into the serial shape (or ranks that share it disagree)"


def _concat(blocks, target):
    shape = blocks[0].shape
    if len(shape) != len(target):
        return None
    axes = [a for a in range(len(shape)) if shape[a] != target[a]]
    if len(axes) != 1 or sum(b.shape[axes[0]] for b in blocks) != target[axes[0]]:
        return None
    return np.concatenate(blocks, axis=axes[0])
