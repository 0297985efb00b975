"""The pipeline simulator: runs pipeline schedules without MPI, proves them deadlock-free,
measures their memory and bubble.

Its input is what ``minidl.dist.pipeline.schedules`` builds: per rank, a list of
instructions (``op``, ``micro_batch``, ``chunk``). With v model chunks per rank,
stage k = chunk * P + rank lives on rank ``rank`` as its chunk ``chunk``
(``stage_of``; ``place_of`` is the inverse), the one home of that formula for the
schedules, the executor and the trainer.

The simulator follows the pipeline executor's rules: a ``send_*`` never blocks (it is an
``isend``), a ``recv_*`` blocks until its neighbour's matching send ran. Each rank
runs its list in order, as early as its messages allow; a forward of stage k costs
``forward_costs[k]`` and a backward ``backward_costs[k]`` (1 by default), messages
cost nothing. If no rank can move while some are unfinished, the schedule deadlocks
(``DeadlockError`` names who waits for what); when every list runs to the end, every
receive met its send, which proves this schedule cannot deadlock for this P and M.

Weight versions: a ``step`` adds one to its rank's version; a forward records the
version it saw, and its backward's staleness is the version then minus that one
(0 for every synchronous schedule). A micro-batch in flight whose version is
older than the live one needs a stashed copy of the weights (``peak_stashed``).

Bubble fraction = idle time / (P * makespan). With equal stages it is
(P-1)/(M+P-1) for GPipe and 1F1B (the GPipe paper, 2019) and (P-1)/(v*M+P-1) for
the interleaved schedule with v chunks per rank (interleaved 1F1B, 2021).
"""

from collections import Counter
from dataclasses import dataclass


def stage_of(rank, chunk, ranks):
    """The global stage index of ``rank``'s chunk ``chunk``: k = chunk * P + rank."""
    return chunk * ranks + rank


def place_of(stage, ranks):
    """(rank, chunk) holding global stage ``stage`` (the inverse of ``stage_of``)."""
    return stage % ranks, stage // ranks


class DeadlockError(RuntimeError):
    """Some ranks wait for messages no rank will send."""


class ScheduleError(ValueError):
    """A schedule breaks a rule the executor relies on (named in the message)."""


@dataclass(frozen=True)
class Event:
    """A compute instruction on ``rank`` from ``start`` to ``end`` (simulated time)."""

    rank: int
    start: float
    end: float
    instruction: object


@dataclass(frozen=True)
class Simulation:
    """What running a schedule showed: timeline, makespan, bubble and peak live activations."""

    ranks: int
    chunks: int
    micro_batches: int
    timeline: tuple  # per rank, its compute Events in order
    makespan: float
    bubble_fraction: float
    peak_live: tuple  # per rank, the most micro-batches (x chunks) whose activations it held
    staleness: tuple = ()  # per rank, per backward: updates between its forward and its own
    peak_stashed: tuple = ()  # per rank, the most older weight versions kept at once

    @property
    def ideal_bubble(self):
        """The textbook bubble of a balanced pipeline: (P-1)/(v*M+P-1)."""
        return ideal_bubble(self.ranks, self.micro_batches, self.chunks)


def ideal_bubble(ranks, micro_batches, chunks=1):
    """(P-1)/(v*M+P-1): GPipe and 1F1B with v = 1, the interleaved schedule with v chunks."""
    return (ranks - 1) / (chunks * micro_batches + ranks - 1)


def message_key(instruction, rank, ranks):
    """The message a send/recv instruction moves: (kind, micro-batch, receiving stage)."""
    k = stage_of(rank, instruction.chunk, ranks)
    return {
        "send_act": ("act", instruction.micro_batch, k + 1),
        "recv_act": ("act", instruction.micro_batch, k),
        "send_grad": ("grad", instruction.micro_batch, k - 1),
        "recv_grad": ("grad", instruction.micro_batch, k),
    }[instruction.op]


def _shape(programs):
    """(P, v, M) read off the programs."""
    ops = [i for program in programs for i in program if i.op != "step"]
    if not ops:
        raise ScheduleError("the schedule computes nothing: no forward or backward on any rank")
    return (len(programs), 1 + max(i.chunk for i in ops), 1 + max(i.micro_batch for i in ops))


def _check_steps(rank, program):
    """One ``step`` at the end (synchronous), or one right after each backward and its
    send (asynchronous: the update of that micro-batch); the list ends with a step."""
    steps = [n for n, ins in enumerate(program) if ins.op == "step"]
    if not program or program[-1].op != "step":
        raise ScheduleError(f"rank {rank}: the list must end with a step")
    if len(steps) == 1:
        return
    backwards = sum(ins.op == "backward" for ins in program)
    if len(steps) != backwards:
        raise ScheduleError(
            f"rank {rank}: {len(steps)} steps; give one at the end, or one after each of "
            f"its {backwards} backwards"
        )
    for n in steps:
        before = n - 1
        while before >= 0 and program[before].op.startswith("send"):
            before -= 1
        own = program[before] if before >= 0 else None
        if own is None or (own.op, own.micro_batch, own.chunk) != (
            "backward",
            program[n].micro_batch,
            program[n].chunk,
        ):
            raise ScheduleError(f"rank {rank}: {program[n]} does not follow its backward")


def check_structure(programs):
    """Each rank: one forward and one backward of every (micro-batch, chunk), backwards
    of a chunk in micro-batch order (a fixed gradient accumulation order), each receive
    before and each send after its compute, steps as ``_check_steps`` says; every send has
    exactly one matching receive. Raises ``ScheduleError`` naming the first violation."""
    ranks, chunks, micro_batches = _shape(programs)
    sends, recvs = Counter(), Counter()
    for r, program in enumerate(programs):
        _check_steps(r, program)
        position = {}
        for n, ins in enumerate(program):
            if ins.op == "step":
                continue
            if (ins.op, ins.micro_batch, ins.chunk) in position:
                raise ScheduleError(f"rank {r}: {ins} appears twice")
            position[ins.op, ins.micro_batch, ins.chunk] = n
            if ins.op.startswith("send"):
                sends[message_key(ins, r, ranks)] += 1
            elif ins.op.startswith("recv"):
                recvs[message_key(ins, r, ranks)] += 1
        last = ranks * chunks - 1
        for c in range(chunks):
            k = stage_of(r, c, ranks)
            order = [i.micro_batch for i in program if i.op == "backward" and i.chunk == c]
            if order != list(range(micro_batches)):
                raise ScheduleError(
                    f"rank {r} chunk {c}: backwards run micro-batches {order}, "
                    f"not 0..{micro_batches - 1} in order"
                )
            for m in range(micro_batches):
                f, b = position.get(("forward", m, c)), position.get(("backward", m, c))
                if f is None:
                    raise ScheduleError(f"rank {r}: no forward of micro-batch {m} chunk {c}")
                pairs = [
                    ("recv_act", f, k > 0, True),
                    ("send_act", f, k < last, False),
                    ("recv_grad", b, k < last, True),
                    ("send_grad", b, k > 0, False),
                ]
                for op, compute, needed, before in pairs:
                    at = position.get((op, m, c))
                    if needed and (at is None or (at < compute) != before):
                        where = "before" if before else "after"
                        raise ScheduleError(
                            f"rank {r}: {op} of micro-batch {m} chunk {c} must come "
                            f"{where} its compute"
                        )
    if sends != recvs:
        unmatched = sorted((sends - recvs) + (recvs - sends))
        raise ScheduleError(f"unmatched messages (kind, micro-batch, stage): {unmatched[:5]}")


def simulate(programs, forward_costs=None, backward_costs=None):
    """Run ``programs`` (one instruction list per rank) and return a ``Simulation``.

    Checks the structure first (``check_structure``), then that every micro-batch's
    forward ran before its backward on every stage, while running.
    """
    check_structure(programs)
    ranks, chunks, micro_batches = _shape(programs)
    stages = ranks * chunks
    forward_costs = [1.0] * stages if forward_costs is None else list(forward_costs)
    backward_costs = list(forward_costs) if backward_costs is None else list(backward_costs)
    if len(forward_costs) != stages or len(backward_costs) != stages:
        raise ValueError(f"costs need one value per stage ({stages} = P * chunks)")
    pc, clock = [0] * ranks, [0.0] * ranks
    live, peak = [0] * ranks, [0] * ranks
    mailbox, version, seen = {}, [0] * ranks, {}
    staleness, stashed = [[] for _ in range(ranks)], [0] * ranks
    timeline = [[] for _ in range(ranks)]
    while True:
        moved = False
        for r, program in enumerate(programs):
            while pc[r] < len(program):
                ins = program[pc[r]]
                if ins.op.startswith("recv"):
                    key = message_key(ins, r, ranks)
                    if key not in mailbox:
                        break
                    clock[r] = max(clock[r], mailbox.pop(key))
                elif ins.op.startswith("send"):
                    mailbox[message_key(ins, r, ranks)] = clock[r]
                elif ins.op == "step":
                    version[r] += 1
                    older = {v for (rank, _, _), v in seen.items() if rank == r and v < version[r]}
                    stashed[r] = max(stashed[r], len(older))
                else:
                    k = stage_of(r, ins.chunk, ranks)
                    cost = (forward_costs if ins.op == "forward" else backward_costs)[k]
                    timeline[r].append(Event(r, clock[r], clock[r] + cost, ins))
                    clock[r] += cost
                    if ins.op == "forward":
                        seen[r, ins.micro_batch, k] = version[r]
                        live[r] += 1
                        peak[r] = max(peak[r], live[r])
                    else:
                        if (r, ins.micro_batch, k) not in seen:
                            raise ScheduleError(f"rank {r}: {ins} runs before its forward")
                        staleness[r].append(version[r] - seen.pop((r, ins.micro_batch, k)))
                        live[r] -= 1
                pc[r] += 1
                moved = True
        if all(pc[r] == len(p) for r, p in enumerate(programs)):
            break
        if not moved:
            waiting = [f"rank {r} at {p[pc[r]]}" for r, p in enumerate(programs) if pc[r] < len(p)]
            raise DeadlockError("the schedule deadlocks: " + "; ".join(waiting))
    makespan = max(clock)
    busy = sum(e.end - e.start for events in timeline for e in events)
    return Simulation(
        ranks=ranks,
        chunks=chunks,
        micro_batches=micro_batches,
        timeline=tuple(tuple(events) for events in timeline),
        makespan=makespan,
        bubble_fraction=1 - busy / (ranks * makespan),
        peak_live=tuple(peak),
        staleness=tuple(tuple(values) for values in staleness),
        peak_stashed=tuple(stashed),
    )


def timeline_text(simulation, cell=4):
    """The timeline as text, one row per rank and ``cell`` characters per time unit:
    ``F3`` a forward of micro-batch 3, ``B3`` its backward, ``.`` idle, ``'`` chunk > 0.

    Needs whole-number costs (the default unit costs are); for example GPipe, P=2, M=2:
    ``rank 0 | F0  F1  .   .   B0  B1  `` over ``rank 1 | .   F0  F1  B0  B1  .   ``.
    """
    span = int(round(simulation.makespan))
    rows = []
    for rank, events in enumerate(simulation.timeline):
        cells = ["."] * span
        for event in events:
            if event.start != int(event.start) or event.end != int(event.end):
                raise ValueError("timeline_text needs whole-number stage costs")
            ins = event.instruction
            mark = ins.op[0].upper() + str(ins.micro_batch) + "'" * ins.chunk
            for t in range(int(event.start), int(event.end)):
                cells[t] = mark
        rows.append(f"rank {rank} | " + "".join(c.ljust(cell) for c in cells))
    return "\n".join(rows)
