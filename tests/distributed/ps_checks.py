"""Parameter-server and averaging checks, run under ``mpiexec -n N python ps_checks.py CHECK``.

Oracles: one process with the global batch (bsp is synchronous SGD), the
closed form w_T = w_0 - (lr / n) * sum of every gradient sent (plain SGD
under asp: Statement 1 of Viviani, Drocco & Aldinucci 2018, each update applied exactly once), the
conservation of x_i + x~ by elastic exchanges, and the SSP bound itself.
"""

import sys

import numpy as np
from mpi_checks import digests, run_named_checks

import minidl as md
from minidl import optim
from minidl.data import ArrayDataset, DataLoader
from minidl.dist import CompressedOptimizer, DistConfig, DistributedOptimizer
from minidl.dist.compression import TopK
from minidl.dist.consistency import make_session
from minidl.dist.consistency.ps import TrainingAborted
from minidl.dist.data_parallel import FlatBuffer
from minidl.dist.straggler import Straggler
from minidl.train.loop import NonFiniteLossError, train_epoch
from minidl_app.cli.specs import parse_compression
from minidl_app.cli.train import parse_dist_mode, parse_straggler

SAMPLES, BATCH, LR = 192, 8, 0.05
EPS32 = np.finfo(np.float32).eps


def dataset(seed=0, samples=SAMPLES):
    rng = np.random.default_rng(seed)
    return ArrayDataset(
        rng.standard_normal((samples, 1, 28, 28)).astype(np.float32),
        rng.integers(0, 10, samples),
        [str(i) for i in range(10)],
    )


def model(seed=0):
    md.manual_seed(seed)
    return md.models.mlp(hidden=(24,))


def sgd(params):
    return optim.SGD(params, lr=LR)


def momentum(params):
    return optim.Momentum(params, lr=LR, momentum=0.9)


def flat_weights(net):
    return FlatBuffer(list(net.parameters())).gather_weights().astype(np.float64)


def run(
    comm,
    mode,
    make_optimizer=sgd,
    epochs=2,
    stragglers=(),
    jitter=0.0,
    servers=1,
    compression=None,
    poll_interval=2e-4,
    setup=None,
    before_step=None,
):
    """Train ``model()`` under ``mode`` as ``minidl train`` does; returns (net, session, records).

    ``setup(session)`` runs once on workers; ``before_step(session)`` before
    each of their optimizer steps. ``records`` is None when training stopped.
    """
    net = model()
    options = DistConfig(
        mode=parse_dist_mode(mode),
        servers=servers,
        compressor=compression,
        poll_interval=poll_interval,
    )
    session = make_session(options, comm, net, make_optimizer)
    loader = session.train_loader(dataset(), BATCH, seed=1)
    delays = Straggler(comm.rank, dict(map(parse_straggler, stragglers)), jitter, seed=3)
    if session.optimizer is not None:
        if setup is not None:
            setup(session)
        if before_step is not None:
            step = session.optimizer.step
            session.optimizer.step = lambda: (before_step(session), step())

    def train():
        try:
            return train_epoch(net, session.optimizer, loader, callbacks=[delays])
        except NonFiniteLossError as exc:
            raise TrainingAborted(str(exc)) from exc

    records = None
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        records = session.finish_epoch(*session.run_epoch(train))
        if records is None:
            break
        session.restore_local()
    session.close()
    return net, session, records


def server_record(records, shard=0):
    return next(r for r in records if r["role"] == "server" and r["rank"] == shard)


def serial_reference(make_optimizer, epochs=2, batch=None):
    """One process, batch ``batch`` (the global batch), the same epochs and sample order."""
    net = model()
    opt = make_optimizer(list(net.parameters()))
    loader = DataLoader(dataset(), batch, shuffle=True, seed=1)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        train_epoch(net, opt, loader)
    return flat_weights(net)


def same_everywhere(comm, array):
    return len(set(digests(comm, np.ascontiguousarray(array)))) == 1


# ---- the checks ---------------------------------------------------------------------------
def check_bsp_is_synchronous_sgd(comm):
    """bsp = one process with n times the batch (momentum SGD), on 1 server or sharded."""
    for servers in range(1, comm.size):
        net, session, records = run(comm, "bsp", momentum, servers=servers)
        workers = comm.size - servers
        reference = serial_reference(momentum, batch=BATCH * workers)
        got = flat_weights(net)
        err = np.linalg.norm(got - reference) / np.linalg.norm(reference)
        limit = 0.0 if workers == 1 else 1e-6  # one worker: the same float operations
        assert err <= limit, f"{servers} server(s): bsp differs from one process by {err:.2e}"
        assert same_everywhere(comm, got)
        assert server_record(records)["staleness"] == {"0": SAMPLES // BATCH}


def check_ssp0_is_bsp_under_delays(comm):
    """ssp:0 with a 3x straggler and jitter reaches bit for bit the weights of a quiet bsp."""
    quiet, _, _ = run(comm, "bsp", momentum)
    slowed, _, records = run(
        comm, "ssp:0", momentum, stragglers=[f"{comm.size - 1}:3"], jitter=0.002
    )
    assert np.array_equal(flat_weights(quiet), flat_weights(slowed))
    assert server_record(records)["staleness"].keys() == {"0"}


def check_ssp_staleness_is_bounded(comm):
    """Under a 10x straggler, ssp:S staleness reaches S and never exceeds it; asp's exceeds it.

    (The model's steps take well under a millisecond: a large factor keeps the
    slow worker slow through the machine's scheduling noise.)
    """
    slow = f"{comm.size - 1}:10"
    for bound in (1, 2):
        _, _, records = run(comm, f"ssp:{bound}", stragglers=[slow], epochs=1)
        observed = max(int(s) for s in server_record(records)["staleness"])
        assert observed == bound, f"ssp:{bound}: max staleness {observed}"
        fast = [r for r in records if r["role"] == "worker"][0]
        assert server_record(records)["gate_wait_s"][0] > 0 and fast["wait_s"] > 0, (
            "the fast worker never waited at the gate"
        )
    _, _, records = run(comm, "asp", stragglers=[slow], epochs=1)
    assert max(int(s) for s in server_record(records)["staleness"]) > 2


def check_asp_applies_every_update_once(comm):
    """Plain SGD under asp: w_T = w_0 - (lr/n) sum(all sent gradients); replicas end equal.

    Also: every batch of the shared queue is processed exactly once, the server
    applies exactly as many gradients as the workers pushed, with compression too.
    """
    for compression, poll in ((None, 2e-4), (TopK(0.05), 0.0)):
        sent_sum = np.zeros(flat_weights(model()).size)
        tickets = []

        def count_sent(session):
            encoder = session.optimizer.encoders[0]
            encode = encoder.encode

            def counted(g):
                payload, sent = encode(g)
                sent_sum[:] += sent
                return payload, sent

            encoder.encode = counted

        net, session, records = run(
            comm,
            "asp",
            sgd,
            epochs=1,
            stragglers=[f"{comm.size - 1}:3"],
            jitter=0.001,
            compression=compression,
            poll_interval=poll,
            setup=count_sent,
            before_step=lambda s: tickets.append(s.optimizer.ticket),
        )
        workers = comm.size - 1
        total = comm.allreduce(sent_sum.copy(), op="sum")
        claimed = sorted(t for mine in comm.allgather_object(tickets) for t in mine)
        assert claimed == list(range(SAMPLES // BATCH)), claimed
        pushed = sum(r["gradients"] for r in records if r["role"] == "worker")
        assert server_record(records)["applied"] == pushed == len(claimed)
        w0, got = flat_weights(model()), flat_weights(net)
        expected = w0 - LR / workers * total
        bound = 4 * EPS32 * pushed * (np.abs(expected) + LR * np.abs(total).max())
        assert (np.abs(got - expected) <= bound).all(), np.abs(got - expected).max()
        assert same_everywhere(comm, got)


def check_averaging(comm):
    """avg:1 with plain SGD is synchronous SGD; avg:3 replicas agree right after each average."""
    averaged, _, _ = run(comm, "avg:1", sgd)
    net = model()
    opt = DistributedOptimizer(sgd(list(net.parameters())), comm)
    loader = DataLoader(
        dataset(), BATCH, shuffle=True, seed=1, rank=comm.rank, world_size=comm.size
    )
    for epoch in range(2):
        loader.set_epoch(epoch)
        train_epoch(net, opt, loader)
    a, b = flat_weights(averaged), flat_weights(net)
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-6

    seen = []

    def before_each_step(session):
        seen.append((session.optimizer.steps, digests(comm, session.buffer.gather_weights())))

    run(comm, "avg:3", sgd, epochs=1, before_step=before_each_step)
    assert len(seen) == SAMPLES // (BATCH * comm.size)
    for steps, hashes in seen:
        assert (len(set(hashes)) == 1) == (steps % 3 == 0), steps  # equal only after averages


def check_easgd_conserves_the_elastic_sum(comm):
    """Exchanges move d between worker and center: sum_i x_i + x~ = (n+1) w_0 + local moves."""
    moved = np.zeros(flat_weights(model()).size)

    def track_local_steps(session):
        local = session.optimizer.optimizer
        inner = local.step

        def step():
            before = flat_weights(session.model)
            inner()
            moved[:] += flat_weights(session.model) - before

        local.step = step

    net, session, records = run(comm, "easgd:0.2:2", sgd, epochs=1, setup=track_local_steps)
    workers = comm.size - 1
    total = comm.allreduce(flat_weights(net), op="sum")  # rank 0 holds the center
    expected = (workers + 1) * flat_weights(model()) + comm.allreduce(moved.copy(), op="sum")
    assert server_record(records)["updates"] == workers * (SAMPLES // (BATCH * workers) // 2)
    assert np.abs(total - expected).max() <= 1e-5 * (1 + np.abs(expected).max())


def check_compressed_sync(comm):
    """CompressedOptimizer: every rank applies the mean of all ranks' decoded payloads.

    Oracle: the float64 mean over ranks of what each rank's encoder says it
    sent; replicas stay bit-identical; bytes are the format's size per step.
    """
    x, y = dataset(seed=comm.rank).images[:BATCH], dataset(seed=comm.rank).labels[:BATCH]
    for spec, tolerance in (
        ("fp16", 2e-3),
        ("qsgd:4", 1e-6),
        ("terngrad", 1e-6),
        ("topk:0.05", 1e-6),
        ("sign", 1e-6),
    ):
        net = model()
        opt = CompressedOptimizer(
            sgd(list(net.parameters())), comm, parse_compression(spec), seed=5
        )
        encoder = opt.compressed.encoder
        encode, sent_now = encoder.encode, []

        def recorded(g):
            payload, sent = encode(g)
            sent_now.append(sent.astype(np.float64))
            return payload, sent

        encoder.encode = recorded
        for step in range(3):
            opt.zero_grad()
            md.functional.cross_entropy(net(md.Tensor(x)), y).backward()
            opt.step()
            applied = opt.whole.flat.astype(np.float64)
            mean = comm.allreduce(sent_now.pop(), op="mean")
            scale = np.abs(mean).max()
            assert np.abs(applied - mean).max() <= tolerance * scale, (spec, step)
            assert same_everywhere(comm, flat_weights(net)), spec
        assert opt.stats["bytes_reduced"] == 3 * parse_compression(spec).wire_bytes(applied.size)
        assert (encoder.residual is not None) == (spec in ("topk:0.05", "sign"))


def check_a_nan_stops_every_rank(comm):
    """A worker whose loss is NaN stops all ranks (no hang) under asp, ssp:1, easgd and avg:2."""
    for mode in ("asp", "ssp:1", "easgd", "avg:2"):
        steps = []

        def poison(session):
            steps.append(1)
            if comm.rank == comm.size - 1 and len(steps) == 3:
                raise NonFiniteLossError("deliberate NaN")

        _, _, records = run(comm, mode, epochs=2, before_step=poison)
        assert records is None, f"{mode}: training went on after a NaN"


if __name__ == "__main__":
    run_named_checks(globals(), sys.argv[1:])
