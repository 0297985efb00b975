"""Pipeline schedules as data: for each rank, the list of ``Instruction``s it runs per batch.

A batch is M micro-batches on P ranks. With v model chunks per rank there are S = v*P
stages, stage k = c*P + r on rank r as its chunk c (``stage_of``). Each schedule is a
per-rank order of forwards and backwards; ``recv_*`` go right before the compute that
needs them, ``send_*`` right after the compute that made them, and ``step`` ends the list.

- ``naive``: one micro-batch at a time through the whole pipeline; bubble (P-1)/P.
- ``gpipe``: all M forwards, then all M backwards (GPipe, 2019); every stage holds M
  micro-batches' activations; bubble (P-1)/(M+P-1).
- ``one_f_one_b``: stage s runs min(P-s-1, M) warm-up forwards, then alternates one
  forward and one backward, then the remaining backwards (PipeDream's 1F1B, 2019, flushed
  once per batch as in PipeDream-Flush); GPipe's bubble, at most P-s micro-batches live.
- ``interleaved``: 1F1B over v chunks per rank in groups of P micro-batches (interleaved
  1F1B, 2021); M a multiple of P; bubble (P-1)/(v*M+P-1).
- ``pipedream``: asynchronous PipeDream (Narayanan et al. 2019): 1F1B's order with a
  ``step`` after every backward, each backward using the weight version its forward saw
  (weight stashing). On stage s micro-batch m is min(m, P-s-1) updates stale; a batch
  drains the pipeline at its end, so it is a window of M updates.

Every schedule runs each chunk's backwards in micro-batch order 0..M-1, so gradients
accumulate in the same order whichever schedule runs.
"""

from dataclasses import dataclass

from minidl.perf.pipeline_simulate import stage_of

OPS = ("forward", "backward", "send_act", "recv_act", "send_grad", "recv_grad", "step")


@dataclass(frozen=True)
class Instruction:
    """One thing a rank does: ``op`` on ``micro_batch`` of its model chunk ``chunk``."""

    op: str
    micro_batch: int = 0
    chunk: int = 0

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"unknown pipeline op {self.op!r}; choose one of {', '.join(OPS)}")

    def __str__(self):
        return self.op if self.op == "step" else f"{self.op}({self.micro_batch}, c{self.chunk})"


def _check_counts(ranks, micro_batches, chunks=1):
    for name, value in (("ranks", ranks), ("micro_batches", micro_batches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"a pipeline schedule needs {name} >= 1 (an int), got {value!r}")


def _check_groups(ranks, micro_batches):
    if micro_batches % ranks:
        fits = ", ".join(str(ranks * i) for i in range(1, 4))
        raise ValueError(
            f"the interleaved schedule runs micro-batches in groups of P = {ranks}; "
            f"{micro_batches} micro-batches is not a multiple of {ranks} (try {fits}), "
            "or use 1f1b"
        )


def _with_messages(rank, ranks, chunks, compute, step_each=False):
    """Add the receives before and the sends after each compute of ``compute``; end with step
    (``step_each``: a step after each backward instead, its micro-batch's update)."""
    last = ranks * chunks - 1
    program = []
    for op, m, c in compute:
        k = stage_of(rank, c, ranks)
        if op == "forward":
            before, after = ("recv_act", k > 0), ("send_act", k < last)
        else:
            before, after = ("recv_grad", k < last), ("send_grad", k > 0)
        if before[1]:
            program.append(Instruction(before[0], m, c))
        program.append(Instruction(op, m, c))
        if after[1]:
            program.append(Instruction(after[0], m, c))
        if step_each and op == "backward":
            program.append(Instruction("step", m, c))
    if not step_each:
        program.append(Instruction("step"))
    return program


def naive(ranks, micro_batches=1):
    """Forward and backward of one micro-batch through all stages before the next starts."""
    _check_counts(ranks, micro_batches)
    compute = [(op, m, 0) for m in range(micro_batches) for op in ("forward", "backward")]
    return [_with_messages(r, ranks, 1, compute) for r in range(ranks)]


def gpipe(ranks, micro_batches):
    """GPipe: every forward of the batch, then every backward (in micro-batch order)."""
    _check_counts(ranks, micro_batches)
    compute = [("forward", m, 0) for m in range(micro_batches)]
    compute += [("backward", m, 0) for m in range(micro_batches)]
    return [_with_messages(r, ranks, 1, compute) for r in range(ranks)]


def one_f_one_b(ranks, micro_batches, step_each=False):
    """1F1B: warm-up w = min(P-s-1, M) forwards on stage s, then F(w+i) B(i), then the rest."""
    _check_counts(ranks, micro_batches)
    programs = []
    for s in range(ranks):
        warmup = min(ranks - s - 1, micro_batches)
        compute = [("forward", m, 0) for m in range(warmup)]
        for i in range(micro_batches - warmup):
            compute += [("forward", warmup + i, 0), ("backward", i, 0)]
        compute += [("backward", m, 0) for m in range(micro_batches - warmup, micro_batches)]
        programs.append(_with_messages(s, ranks, 1, compute, step_each))
    return programs


def pipedream(ranks, micro_batches):
    """PipeDream: the 1F1B order with an update after every backward (weight stashing)."""
    return one_f_one_b(ranks, micro_batches, step_each=True)


def interleaved(ranks, micro_batches, chunks=2):
    """Interleaved 1F1B with ``chunks`` = v model chunks per rank (M must be a multiple of P).
    Virtual micro-batch j (0..v*M-1) of a rank is micro-batch (j // vP) * P + j % P of
    chunk (j % vP) // P for a forward, chunk v-1 - (j % vP) // P for a backward.
    Rank r warms up with min(2(P-r-1) + (v-1)P, vM) forwards, then alternates."""
    _check_counts(ranks, micro_batches, chunks)
    _check_groups(ranks, micro_batches)
    group, total = ranks * chunks, chunks * micro_batches

    def virtual(op, j):
        position = (j % group) // ranks
        chunk = position if op == "forward" else chunks - 1 - position
        return op, (j // group) * ranks + j % ranks, chunk

    programs = []
    for r in range(ranks):
        warmup = min(2 * (ranks - r - 1) + (chunks - 1) * ranks, total)
        compute = [virtual("forward", j) for j in range(warmup)]
        for i in range(total - warmup):
            compute += [virtual("forward", warmup + i), virtual("backward", i)]
        compute += [virtual("backward", j) for j in range(total - warmup, total)]
        programs.append(_with_messages(r, ranks, chunks, compute))
    return programs


SCHEDULES = {
    "naive": naive,
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "pipedream": pipedream,
}
ASYNCHRONOUS = ("pipedream",)  # an update per micro-batch: not the serial step


def default_chunks(name):
    """Model chunks per rank when none are given: 2 for interleaved, else 1."""
    return 2 if name == "interleaved" else 1


def check(name, ranks, micro_batches, chunks=1):
    """Refuse what ``build`` cannot build (``ValueError`` saying what would), without building."""
    if name not in SCHEDULES:
        raise ValueError(
            f"unknown pipeline schedule {name!r}; choose one of {', '.join(SCHEDULES)}"
        )
    _check_counts(ranks, micro_batches, chunks)
    if name == "interleaved":
        _check_groups(ranks, micro_batches)
    elif chunks != 1:
        raise ValueError(
            f"the {name} schedule puts one model chunk on each rank, got chunks={chunks}; "
            "use chunks=1, or the interleaved schedule"
        )


def build(name, ranks, micro_batches, chunks=1):
    """The programs of schedule ``name`` (one of ``SCHEDULES``), one instruction list per rank."""
    check(name, ranks, micro_batches, chunks)
    if name == "interleaved":
        return interleaved(ranks, micro_batches, chunks)
    return SCHEDULES[name](ranks, micro_batches)
