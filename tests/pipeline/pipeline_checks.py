"""Pipeline checks, run under ``mpiexec -n P python pipeline_checks.py CHECK...``.

The oracle: pipeline training on P ranks with M micro-batches applies the same
updates as one process with the whole batch. Every rank trains the serial model
itself and compares; a failed assertion ends the job through minidl's exception
hook. A passing rank prints ``CHECK <name> OK rank <r>``, which the test counts.
"""

import sys

import numpy as np

import minidl as md
from minidl import dist, optim
from minidl import functional as F
from minidl import layers as L
from minidl.dist.pipeline import PipelineTrainer
from minidl.dist.pipeline.trainer import build_stage, partition
from minidl.reference.dist.pipeline import pipedream_window

STEPS, BATCH, LR = 20, 10, 0.1


def mlp():
    """Nine float64 layers: enough for 4 ranks x 2 chunks."""
    md.manual_seed(3)
    sizes = [6, 16, 16, 12, 12, 5]
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [L.Linear(a, b), L.Tanh()]
    return L.Sequential(*layers[:-1]).to("float64")


def convnet():
    md.manual_seed(4)
    return L.Sequential(
        L.Conv2d(1, 3, 3, padding=1, algo="im2col"),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Conv2d(3, 4, 3, algo="im2col"),
        L.Tanh(),
        L.Flatten(),
        L.Linear(16, 5),
    ).to("float64")


def batches(shape, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, *shape)), rng.integers(0, 5, BATCH)) for _ in range(STEPS)]


def sgd(params):
    return optim.SGD(params, lr=LR)


def momentum(params):
    return optim.Momentum(params, lr=LR, momentum=0.9)


def serial(make_model, data, make_optimizer=sgd):
    """One process, the whole batch per step: the weights and the losses."""
    model = make_model()
    opt = make_optimizer(model.parameters())
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.cross_entropy(model(md.Tensor(x)), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.state_dict(), losses


def relative_error(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def assert_same_as_serial(comm, make_model, shape, make_optimizer=sgd, **options):
    data = batches(shape)
    expected, expected_losses = serial(make_model, data, make_optimizer)
    trainer = PipelineTrainer(make_model(), comm, optimizer=make_optimizer, **options)
    losses = [trainer.step(x, y) for x, y in data]
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-10, err_msg=str(options))
    state = trainer.state_dict()
    if comm.rank == 0:
        assert list(state) == list(expected), (list(state), list(expected))
        for name, value in expected.items():
            error = relative_error(state[name], value)
            assert error < 1e-10, (options, name, error)
    else:
        assert state is None


def cases(size):
    for schedule in ("naive", "gpipe", "1f1b"):
        for m in (1, 3, 8):
            yield {"schedule": schedule, "micro_batches": m}
    for m in (size, 2 * size):
        yield {"schedule": "interleaved", "micro_batches": m}


def check_mlp(comm):
    for options in cases(comm.size):
        assert_same_as_serial(comm, mlp, (6,), **options)
    # more micro-batches than rows: one micro-batch per row, still the serial step
    assert_same_as_serial(comm, mlp, (6,), schedule="1f1b", micro_batches=BATCH + 2)


class CountingComm:
    """A communicator that counts the gradient allreduces it starts (blocking or not)."""

    def __init__(self, comm):
        self.comm, self.allreduces = comm, 0

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def allreduce(self, *args, **kwargs):
        self.allreduces += 1
        return self.comm.allreduce(*args, **kwargs)

    def iallreduce(self, *args, **kwargs):
        self.allreduces += 1
        return self.comm.iallreduce(*args, **kwargs)


def check_dp_pp(comm):
    """dp=2 x pp=P/2: each replica pipelines its half of the batch; the ranks of a stage
    average their gradients in exactly one allreduce per step; the weights equal one process
    with the whole batch, a short last batch (uneven halves) included."""
    grid = dist.Grid(comm, dp=2, pp=comm.size // 2)
    rng = np.random.default_rng(7)
    rows = [2 * BATCH] * (STEPS - 1) + [7]  # the last: 4 rows on replica 0, 3 on replica 1
    data = [(rng.standard_normal((n, 6)), rng.integers(0, 5, n)) for n in rows]
    expected, expected_losses = serial(mlp, data, momentum)
    for schedule, m in (("gpipe", 3), ("1f1b", 4)):
        counting = CountingComm(grid.group("dp"))
        trainer = PipelineTrainer(
            mlp(),
            grid.group("pp"),
            optimizer=momentum,
            schedule=schedule,
            micro_batches=m,
            data_parallel=counting,
        )
        losses = []
        for step, (x, y) in enumerate(data):
            half = np.array_split(np.arange(len(y)), 2)[grid.coords["dp"]]
            before = counting.allreduces
            losses.append(trainer.step(x[half], y[half], global_rows=len(y)) * len(half))
            assert counting.allreduces - before == 1, (schedule, step, counting.allreduces)
        totals = np.array(losses)
        grid.group("dp").allreduce(totals, op="sum")
        np.testing.assert_allclose(totals / rows, expected_losses, rtol=1e-10)
        state = trainer.full_state_dict()
        assert list(state) == list(expected)
        for name, value in expected.items():
            error = relative_error(state[name], value)
            assert error < 1e-10, (schedule, m, name, error)


def check_stage_choices(comm):
    """Cuts by parameter count and at given points, and an optimizer with state (momentum),
    give the serial result too."""
    cuts = [2 * (i + 1) for i in range(comm.size - 1)]
    for stages in ("parameters", cuts):
        assert_same_as_serial(comm, mlp, (6,), schedule="1f1b", micro_batches=4, stages=stages)
    assert_same_as_serial(comm, mlp, (6,), momentum, schedule="gpipe", micro_batches=5)


def check_convnet(comm):
    for schedule in ("gpipe", "1f1b"):
        assert_same_as_serial(comm, convnet, (1, 8, 8), schedule=schedule, micro_batches=3)


def bn_net():
    """Batch statistics in both a convolutional and a fully connected part."""
    md.manual_seed(5)
    return L.Sequential(
        L.Conv2d(1, 3, 3, padding=1, algo="im2col"),
        L.BatchNorm2d(3),
        L.ReLU(),
        L.MaxPool2d(2),
        L.Flatten(),
        L.Linear(48, 8),
        L.BatchNorm1d(8),
        L.Tanh(),
        L.Linear(8, 5),
    ).to("float64")


def per_micro_batch(make_model, data, micro_batches):
    """The semantics oracle of pipelining with batch statistics: one process applies the
    model to each micro-batch separately (its own mean and variance, one running-statistics
    update each, in micro-batch order) and sums the losses scaled by n_m / N."""
    model = make_model()
    opt = sgd(model.parameters())
    losses = []
    for x, y in data:
        opt.zero_grad()
        total = None
        for xm, ym in zip(np.array_split(x, micro_batches), np.array_split(y, micro_batches)):
            loss = F.cross_entropy(model(md.Tensor(xm)), ym) * (len(ym) / len(y))
            total = loss if total is None else total + loss
        total.backward()
        opt.step()
        losses.append(total.item())
    return model.state_dict(), losses


def check_batchnorm(comm):
    """BatchNorm under the pipeline normalises each micro-batch by its own statistics (as
    GPipe does): equal to the per-micro-batch oracle, weights and running statistics, and
    not to one process on the whole batch."""
    data = batches((1, 8, 8))
    whole, _ = serial(bn_net, data)
    for schedule, m in (("gpipe", 3), ("1f1b", 4), ("1f1b", 1)):
        expected, expected_losses = per_micro_batch(bn_net, data, m)
        trainer = PipelineTrainer(bn_net(), comm, optimizer=sgd, schedule=schedule, micro_batches=m)
        losses = [trainer.step(x, y) for x, y in data]
        np.testing.assert_allclose(losses, expected_losses, rtol=1e-10, err_msg=schedule)
        state = trainer.state_dict()
        if comm.rank == 0:
            assert list(state) == list(expected), (list(state), list(expected))
            assert any("running_mean" in name for name in state), list(state)
            for name, value in expected.items():
                error = relative_error(state[name], value)
                assert error < 1e-10, (schedule, m, name, error)
            differs = max(relative_error(state[n], whole[n]) for n in whole)
            assert (differs > 1e-6) == (m > 1), (schedule, m, differs)


def check_refusals(comm):
    """Bad arguments raise the same clear error on every rank, before any message."""
    cases = [
        ({"micro_batches": 3, "schedule": "interleaved"}, "not a multiple"),
        ({"schedule": "zigzag"}, "choose one of"),
        ({"stages": "flops"}, "a list of cut points"),
        ({"micro_batches": 0}, "micro_batches >= 1"),
    ]
    for options, hint in cases:
        try:
            PipelineTrainer(mlp(), comm, optimizer=sgd, **options)
        except ValueError as exc:
            assert hint in str(exc), str(exc)
        else:
            raise AssertionError(f"no error for {options}")
    try:
        PipelineTrainer(mlp(), comm, optimizer=lambda ps: optim.SGD(ps, 0.1, clip_grad_norm=1))
    except ValueError as exc:
        assert "clip_grad_norm would clip each rank's share" in str(exc), str(exc)
    else:
        raise AssertionError("no error for a clipping optimizer")


def check_pipedream(comm):
    """PipeDream on P ranks applies the updates of the one-process reference, which stashes
    weight copies and recomputes each forward at its backward (another way to the same
    numbers), with staleness min(m, P-s-1) on stage s; for P > 1 that is not the serial step
    (on one rank it is M plain SGD steps per batch, not the serial one either)."""
    p, m = comm.size, 4
    data = batches((6,))
    model = mlp()
    cut = partition(model, p)
    stages = [build_stage(model, cut, s) for s in range(p)]
    optimizers = [sgd(stage.parameters()) for stage in stages]
    for x, y in data:
        pipedream_window(
            stages, optimizers, np.array_split(x, m), np.array_split(y, m), F.cross_entropy
        )
    expected = model.state_dict()
    trainer = PipelineTrainer(mlp(), comm, optimizer=sgd, schedule="pipedream", micro_batches=m)
    for x, y in data:
        trainer.step(x, y)
    state = trainer.full_state_dict()
    for name, value in expected.items():
        error = relative_error(state[name], value)
        assert error < 1e-10, (name, error)
    stale = {k: STEPS * sum(min(i, p - comm.rank - 1) == k for i in range(m)) for k in range(p)}
    assert trainer.staleness.counts == {k: v for k, v in stale.items() if v}, trainer.staleness
    synchronous, _ = serial(mlp, data)
    differs = max(relative_error(state[n], synchronous[n]) for n in synchronous)
    assert differs > 1e-6 or p == 1, differs  # asynchronous: not the serial step


def check_non_finite(comm):
    """dp=2 x pp: a non-finite value in one replica's rows poisons the averaged gradients;
    every rank of every stage raises after the batch (none waits for a message), for the
    synchronous and the asynchronous schedules."""
    grid = dist.Grid(comm, dp=2, pp=comm.size // 2)
    for schedule in ("1f1b", "pipedream"):
        trainer = PipelineTrainer(
            mlp(),
            grid.group("pp"),
            optimizer=sgd,
            schedule=schedule,
            micro_batches=3,
            data_parallel=grid.group("dp"),
        )
        x, y = batches((6,))[0]
        if grid.coords["dp"] == 0:
            x = x.copy()
            x[4, 2] = np.inf
        try:
            with np.errstate(all="ignore"):
                trainer.step(x, y)
        except ArithmeticError as exc:
            assert "not finite" in str(exc) or "refused its update" in str(exc), str(exc)
        else:
            raise AssertionError(f"{schedule}: no error for a non-finite gradient")
        trainer.step(*batches((6,), seed=1)[0])  # the ranks still talk: nothing is left hanging


def sgd_per_micro_batch(stages, optimizers, inputs, targets, loss):
    """Wrong for 10.4: each micro-batch through every stage and updated before the next,
    so every gradient is fresh; PipeDream's are min(m, P-s-1) updates stale."""
    model = L.Sequential(*[layer for stage in stages for layer in stage._modules.values()])
    for x, y in zip(inputs, targets):
        loss(model(md.Tensor(x)), y).backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()


def check_exercise_weight_stashing(comm):
    """Exercise 10.4 passes on the reference and fails on a PipeDream without staleness."""
    from minidl import exercises
    from minidl.reference.dist import pipeline as R

    exercises.get("10.4").check(comm)
    right, R.pipedream_window = R.pipedream_window, sgd_per_micro_batch
    try:
        exercises.get("10.4").check(comm)
    except exercises.ExerciseFailure as exc:
        assert "M=3, 4 windows" in str(exc) and "against minidl's executor" in str(exc), str(exc)
    else:
        raise AssertionError("10.4 passed on SGD without staleness")
    finally:
        R.pipedream_window = right


def adam(params):
    return optim.Adam(params, lr=0.01)


def assert_same_optimizer_state(got, expected, where):
    assert got["hyper"].keys() == expected["hyper"].keys(), where
    assert len(got["state"]) == len(expected["state"]), where
    for index, (state, oracle) in enumerate(zip(got["state"], expected["state"])):
        assert state.keys() == oracle.keys(), (where, index)
        for key, value in oracle.items():
            error = relative_error(np.asarray(state[key]), np.asarray(value))
            assert error < 1e-10, (where, index, key, error)


def check_optimizer_state(comm):
    """The interleaved pipeline's gathered Adam state is one process's after the same steps
    (a rank may hold no parameters: 9 layers in 2P stages); a 1F1B pipeline given that
    state and the weights goes on as the one process does."""
    data = batches((6,))
    half = STEPS // 2
    model = mlp()
    opt = adam(model.parameters())
    for step, (x, y) in enumerate(data):
        if step == half:  # a copy: Adam updates its arrays in place
            state = opt.state_dict()
            state["state"] = [{k: np.copy(v) for k, v in s.items()} for s in state["state"]]
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y).backward()
        opt.step()
    first = PipelineTrainer(
        mlp(), comm, optimizer=adam, schedule="interleaved", micro_batches=comm.size
    )
    for x, y in data[:half]:
        first.step(x, y)
    assert_same_optimizer_state(first.full_optimizer_state(), state, "interleaved, gathered")
    resumed = mlp()
    resumed.load_state_dict(first.full_state_dict())
    second = PipelineTrainer(resumed, comm, optimizer=adam, schedule="1f1b", micro_batches=3)
    second.load_optimizer_state(first.full_optimizer_state())
    for x, y in data[half:]:
        second.step(x, y)
    assert_same_optimizer_state(second.full_optimizer_state(), opt.state_dict(), "resumed")
    for name, value in second.full_state_dict().items():
        assert relative_error(value, model.state_dict()[name]) < 1e-10, name


def main(argv):
    checks = {n[len("check_") :]: f for n, f in globals().items() if n.startswith("check_")}
    comm = dist.init()
    for name in argv:
        checks[name](comm)
        print(f"CHECK {name} OK rank {comm.rank}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
