"""AlexNet (torchvision variant) forward+backward, batch 16, 224x224: minidl vs PyTorch CPU.

    python benchmarks/bench_alexnet.py [--threads 2] [--batch 16] [--rounds 5] [--tune-malloc]

Same weights and input on both sides; one round = one forward+backward of
each framework (alternating, so machine noise hits both, with a pause before
each so that neither pays for the other's spinning threads); medians over
rounds after a warm-up round (which also lets minidl's autotuner choose).
The output and the first layer's weight gradient are compared as a check.
minidl runs as a library by default (its buffer pool, nothing process-wide);
``--tune-malloc`` first applies ``md.backend.tune_malloc()``, as the ``minidl``
command does.
"""

import argparse
import statistics
import time

import numpy as np

import minidl as md
from minidl import functional as F
from minidl.backend import limit_threads, tune_malloc


def torch_alexnet(torch, state):
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(3, 2),
        nn.Flatten(),
        nn.Dropout(),
        nn.Linear(9216, 4096),
        nn.ReLU(),
        nn.Dropout(),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Linear(4096, 1000),
    )
    net.load_state_dict({k: torch.tensor(np.array(v)) for k, v in state.items()})
    return net


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--pause",
        type=float,
        default=0.5,
        help="seconds of rest before each timed run: thread pools of the "
        "framework that ran last busy-wait for a while after their work",
    )
    parser.add_argument(
        "--tune-malloc",
        action="store_true",
        help="apply md.backend.tune_malloc() first, as the minidl command does",
    )
    args = parser.parse_args()
    if args.tune_malloc:
        tune_malloc()
    import torch

    torch.set_num_threads(args.threads)
    limits = limit_threads(args.threads)  # noqa: F841 (BLAS and minidl threads while it lives)
    md.manual_seed(0)
    model = md.models.alexnet(num_classes=1000, variant="torchvision").eval()  # dropout off
    net = torch_alexnet(torch, model.state_dict()).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, 224, 224)).astype(np.float32)
    y = rng.integers(0, 1000, args.batch)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def ours():
        model.zero_grad()
        out = model(md.Tensor(x))
        F.cross_entropy(out, y).backward()
        return out

    def theirs():
        net.zero_grad()
        out = net(tx)
        torch.nn.functional.cross_entropy(out, ty).backward()
        return out

    out, ref = ours(), theirs()  # warm-up (and the autotuner's trials)
    err = np.abs(out.numpy() - ref.detach().numpy()).max() / np.abs(ref.detach().numpy()).max()
    gw, tgw = model[0].weight.grad, net[0].weight.grad.numpy()
    gerr = np.linalg.norm(gw - tgw) / np.linalg.norm(tgw)
    mine, ref_times = [], []
    for _ in range(args.rounds):
        for fn, times in ((ours, mine), (theirs, ref_times)):
            time.sleep(args.pause)  # the other framework's idle threads stop spinning
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    m, t = statistics.median(mine), statistics.median(ref_times)
    mode = "after tune_malloc()" if args.tune_malloc else "as a library"
    print(
        f"AlexNet (torchvision) forward+backward, batch {args.batch}, {args.threads} threads, "
        f"median of {args.rounds}, minidl {mode}"
    )
    print(f"  minidl  {1e3 * m:7.1f} ms   runs: " + ", ".join(f"{1e3 * s:.0f}" for s in mine))
    print(f"  PyTorch {1e3 * t:7.1f} ms   runs: " + ", ".join(f"{1e3 * s:.0f}" for s in ref_times))
    print(f"  ratio minidl/PyTorch = {m / t:.2f}  (target <= 1.0; issue 20: 1.3)")
    print(
        f"  check: max output difference {err:.1e} (relative), conv1 weight-gradient "
        f"difference {gerr:.1e}"
    )
    print(md.conv.report())


if __name__ == "__main__":
    main()
