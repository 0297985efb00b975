"""ZeRO on 2 ranks: bytes of parameters, gradients and optimizer state per rank, and step time.

    mpiexec -n 2 python benchmarks/bench_zero.py [--model alexnet] [--batch-size 16] [--steps 3]

For plain sync data parallelism (``DistributedOptimizer``) and ZeRO stages 1 and 2
(``ZeroOptimizer``), with momentum and with Adam, each rank trains ``--steps`` steps of
the model on random data (local batch ``--batch-size``, float32) and counts:

- parameters: the bytes of the model's weights;
- gradients: the most bytes of gradients alive at once, sampled after every gradient a
  backward accumulates and after the step (the parameters' ``grad`` arrays, the plain
  optimizer's bucket buffers, ZeRO's shard of the averaged gradient);
- optimizer state: the bytes of the state arrays after the last step;

and the median step time. It prints each next to one process's P + P + K P (P parameter
bytes, K state arrays per parameter: momentum 1, Adam 2) and to the ZeRO paper's formula
(Rajbhandari et al. 2020) for n ranks: stage 1 P + P + K P / n, stage 2 P + P / n + K P / n.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl import functional as F
from minidl import optim
from minidl.dist import DistributedOptimizer, ZeroOptimizer

RULES = {  # name: (the optimizer, its state arrays per parameter)
    "momentum": (lambda ps: optim.Momentum(ps, lr=1e-3, momentum=0.9), 1),
    "adam": (lambda ps: optim.Adam(ps, lr=1e-4), 2),
}


def build(name):
    md.manual_seed(0)
    if name == "alexnet":
        return md.models.alexnet(num_classes=1000, variant="torchvision"), (3, 224, 224)
    return md.models.lenet5(), (1, 28, 28)


def measure(comm, name, rule, stage, batch, steps):
    model, shape = build(name)
    make, _ = RULES[rule]
    params = list(model.parameters())
    plain = make(params)
    if stage:
        opt = ZeroOptimizer(plain, comm, stage=stage)
    else:
        opt = DistributedOptimizer(plain, comm)
    peak = [0]

    def gradient_bytes(_=None):
        held = {id(p.grad): p.grad.nbytes for p in params if p.grad is not None}
        if stage:  # this rank's pieces of the averaged gradient
            held.update((id(q.grad), q.grad.nbytes) for q in plain.params if q.grad is not None)
        else:
            for bucket in opt.buckets:
                held.setdefault(id(bucket.flat), bucket.flat.nbytes)
        peak[0] = max(peak[0], sum(held.values()))

    for p in params:
        p.register_post_accumulate_grad_hook(gradient_bytes)
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    seconds = []
    for _ in range(steps):
        comm.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(md.Tensor(x)), y).backward()
        opt.step()
        gradient_bytes()
        seconds.append(time.perf_counter() - start)
    state = sum(v.nbytes for s in plain.state for v in s.values() if isinstance(v, np.ndarray))
    weights = sum(p.data.nbytes for p in params)
    return weights, peak[0], state, statistics.median(seconds[1:] or seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("alexnet", "lenet5"), default="alexnet")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    comm = md.dist.init()
    md.backend.limit_threads(1)
    for rule, (_, k) in RULES.items():
        base = None
        for stage in (0, 1, 2):
            weights, grads, state, seconds = measure(
                comm, args.model, rule, stage, args.batch_size, args.steps
            )
            mine = comm.allgather_object((weights, grads, state, seconds))
            if comm.rank:
                continue
            p, n = weights, comm.size
            one = p + p + k * p
            formula = {0: one, 1: p + p + k * p / n, 2: p + p / n + k * p / n}[stage]
            worst = max(w + g + s for w, g, s, _ in mine)
            step = max(t for *_, t in mine)
            base = step if stage == 0 else base
            name = "sync" if stage == 0 else f"zero-{stage}"
            print(
                f"{args.model} {rule} {name}: per rank params {weights / 2**20:.1f} MiB, "
                f"gradients {max(g for _, g, _, _ in mine) / 2**20:.1f} MiB, state "
                f"{max(s for _, _, s, _ in mine) / 2**20:.1f} MiB; total {worst / one:.3f}x one "
                f"process (formula {formula / one:.3f}x); step {1e3 * step:.0f} ms "
                f"({step / base:.2f}x sync)",
                flush=True,
            )


if __name__ == "__main__":
    main()
