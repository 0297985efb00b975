"""Pipeline schedules: GPipe and 1F1B lists of one stage, the bubble, PipeDream weight stashing.

A model cut into P stages runs on P workers, stage s on worker s; a batch is split
into M micro-batches. Stage s computes F(m), the forward of micro-batch m, after
receiving its activation from stage s-1, and B(m), its backward, after receiving
its gradient from stage s+1. With every stage taking time t_f per forward and
t_b per backward:

**GPipe** (the GPipe paper, 2019): every forward, then every backward,

    stage s:  F(0) F(1) ... F(M-1)  B(0) B(1) ... B(M-1)

The first micro-batch reaches stage P-1 after (P-1) t_f and the last gradient
leaves stage 0 (P-1) t_b after stage P-1's last backward, so the batch takes
(M + P - 1)(t_f + t_b) of which each stage computes M (t_f + t_b):

    bubble = idle / total = (P - 1) / (M + P - 1).

Stage s holds the activations of all M micro-batches before its first backward:
peak memory M micro-batches on every stage.

**1F1B** (PipeDream's one-forward-one-backward, 2019, flushed every batch): stage s
warms up with w = min(P - s - 1, M) forwards, then alternates one forward and one
backward, then cools down with the w backwards left:

    stage s:  F(0) ... F(w-1)  [F(w) B(0)] [F(w+1) B(1)] ... [F(M-1) B(M-w-1)]  B(M-w) ... B(M-1)

The bubble is the same (P - 1)/(M + P - 1), but a backward frees a micro-batch as
soon as the next forward adds one, so at most min(P - s, M) micro-batches are live
on stage s: P on the first stage, 1 on the last, whatever M is.

With v model chunks per worker (interleaved 1F1B, 2021) the same argument gives
(P - 1)/(v M + P - 1).

**PipeDream** (Narayanan et al. 2019) keeps the 1F1B order but never flushes: stage
s updates its weights W_s after every backward, with that micro-batch's gradient.
Micro-batch m's forward on stage s saw version max(0, m - w) of W_s and its backward
comes after m updates, so its gradient is min(m, w) updates stale. *Weight stashing*
makes the gradient consistent within a stage: the backward of m differentiates the
weights its forward used (a stashed copy), not the newer ones, and is applied to the
newest: W <- W - lr * grad L_m(W_stashed). Stage s keeps up to w = P-s-1 stashed
versions.

Backwards run in micro-batch order 0, 1, ..., M-1 in both schedules, so the
gradients add up in the same order as in one process. The lists use minidl's
``Instruction`` (``minidl/dist/pipeline/schedules.py``), whose executor runs them:
``with_messages`` puts each receive right before the compute that needs it, each
send right after the compute that made it, and ``step`` at the end.

An exercise region here must not call the tuned schedules or simulator
(``minidl.dist.pipeline.schedules``, ``minidl.perf.pipeline_simulate``): the check fails one
that does, since the exercise is to write the algorithm out.
"""

from minidl.autograd import Tensor, no_grad
from minidl.dist.pipeline import schedules
from minidl.dist.pipeline.schedules import Instruction


def forward(m):
    """F(m): the forward of micro-batch m."""
    return Instruction("forward", m)


def backward(m):
    """B(m): the backward of micro-batch m."""
    return Instruction("backward", m)


def with_messages(stage, stages, order):
    """Stage ``stage``'s whole list from its order of forwards and backwards.

    A forward receives its input from stage s-1 (none on stage 0) and sends its
    output on to stage s+1 (none on the last stage); a backward receives its
    output's gradient from s+1 and sends its input's gradient back to s-1.
    """
    first, last = stage == 0, stage == stages - 1
    program = []
    for compute in order:
        m = compute.micro_batch
        if compute.op == "forward":
            receive, send = (None if first else "recv_act"), (None if last else "send_act")
        else:
            receive, send = (None if last else "recv_grad"), (None if first else "send_grad")
        if receive:
            program.append(Instruction(receive, m))
        program.append(compute)
        if send:
            program.append(Instruction(send, m))
    return [*program, Instruction("step")]


def gpipe(stage, stages, micro_batches):
    """GPipe's list for stage ``stage`` of ``stages``: all M forwards, then all M backwards."""
    # BEGIN EXERCISE 10.1
    order = [forward(m) for m in range(micro_batches)]
    order += [backward(m) for m in range(micro_batches)]
    # END EXERCISE 10.1
    return with_messages(stage, stages, order)


def one_f_one_b(stage, stages, micro_batches):
    """1F1B's list for stage ``stage``: w = min(P-s-1, M) forwards, F/B pairs, w backwards."""
    # BEGIN EXERCISE 10.2
    warmup = min(stages - stage - 1, micro_batches)
    order = [forward(m) for m in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [forward(warmup + i), backward(i)]
    order += [backward(m) for m in range(micro_batches - warmup, micro_batches)]
    # END EXERCISE 10.2
    return with_messages(stage, stages, order)


def bubble_fraction(stages, micro_batches, chunks=1):
    """The idle share of a balanced pipeline's time: (P - 1)/(v M + P - 1), v = ``chunks``."""
    # BEGIN EXERCISE 10.3
    return (stages - 1) / (chunks * micro_batches + stages - 1)
    # END EXERCISE 10.3


def peak_activations(schedule, stage, stages, micro_batches):
    """Most micro-batches live on stage ``stage``: M (GPipe), min(P-s, M) (1F1B)."""
    if schedule == "gpipe":
        return micro_batches
    if schedule == "1f1b":
        return min(stages - stage, micro_batches)
    raise ValueError(f"peak_activations knows 'gpipe' and '1f1b', got {schedule!r}")


def pipedream_window(stages, optimizers, inputs, targets, loss):
    """PipeDream with weight stashing on ``stages`` (modules) in one process, for the
    micro-batches ``inputs[m]``/``targets[m]``; ``optimizers[s]`` (None: no parameters)
    steps after each backward of stage s. ``loss(output, target)``: a micro-batch's mean.

    Stages take turns running their 1F1B order as far as their inputs allow. A forward
    keeps its input and a copy of the weights it used; its backward puts that copy in
    place, recomputes the forward from the kept input and differentiates it, puts the
    live weights back, then updates them. (Recomputing runs batch statistics twice:
    for models without them.)
    """
    count, last = len(stages), len(stages) - 1
    orders = [  # minidl's 1F1B lists (so that this runs without exercise 10.2 done)
        [i for i in program if i.op in ("forward", "backward")]
        for program in schedules.one_f_one_b(count, len(inputs))
    ]
    kept, stash, grads, done = {(m, 0): x for m, x in enumerate(inputs)}, {}, {}, [0] * count
    while any(done[s] < len(orders[s]) for s in range(count)):
        for s, stage in enumerate(stages):
            params = list(stage.parameters())
            while done[s] < len(orders[s]):
                m, op = orders[s][done[s]].micro_batch, orders[s][done[s]].op
                if op == "forward":
                    if (m, s) not in kept:
                        break
                    with no_grad():
                        out = stage(Tensor(kept[m, s])).data
                    if s < last:
                        kept[m, s + 1] = out
                    # BEGIN EXERCISE 10.4
                    stash[m, s] = [p.data.copy() for p in params]
                    # END EXERCISE 10.4
                else:
                    if s < last and (m, s) not in grads:
                        break
                    x = Tensor(kept.pop((m, s)), requires_grad=True)
                    # BEGIN EXERCISE 10.4
                    live = [p.data for p in params]
                    for p, w in zip(params, stash.pop((m, s))):
                        p.data = w
                    out = stage(x)
                    if s == last:
                        loss(out, targets[m]).backward()
                    else:
                        out.backward(grads.pop((m, s)))
                    for p, w in zip(params, live):
                        p.data = w
                    # END EXERCISE 10.4
                    if s > 0:
                        grads[m, s - 1] = x.grad
                    if optimizers[s] is not None:
                        optimizers[s].step()
                        optimizers[s].zero_grad()
                done[s] += 1
