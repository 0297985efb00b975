"""The convolution algorithms side by side on LeNet, AlexNet and 3x3 layers (``minidl bench conv``).

Per layer and algorithm: forward and forward+backward time (a net's first layer computes
no input gradient), GFLOP/s as the direct convolution's 2*N*K*C*KH*KW*OH*OW flops, the
error max|y - y64| / max|y64| against a float64 im2col convolution, and the forward
workspace; plus PyTorch's times when installed. A layer's candidates are timed in
interleaved rounds in one process; medians are reported.
"""

import contextlib
import functools
import time
from dataclasses import dataclass

import numpy as np

from minidl import conv
from minidl.autograd import no_grad, tensor
from minidl.conv.registry import implementation

LAYERS = (  # name, x shape without the batch, weight shape, conv arguments, first layer of its net
    ("lenet.conv1", (1, 28, 28), (6, 1, 5, 5), dict(padding=2), True),
    ("lenet.conv2", (6, 14, 14), (16, 6, 5, 5), {}, False),
    ("alexnet.conv1", (3, 224, 224), (64, 3, 11, 11), dict(stride=4, padding=2), True),
    ("alexnet.conv2", (64, 27, 27), (192, 64, 5, 5), dict(padding=2), False),
    ("alexnet.conv3", (192, 13, 13), (384, 192, 3, 3), dict(padding=1), False),
    ("alexnet.conv4", (384, 13, 13), (256, 384, 3, 3), dict(padding=1), False),
    ("alexnet.conv5", (256, 13, 13), (256, 256, 3, 3), dict(padding=1), False),
    ("3x3.c64.56px", (64, 56, 56), (64, 64, 3, 3), dict(padding=1), False),
    ("3x3.c128.28px", (128, 28, 28), (128, 128, 3, 3), dict(padding=1), False),
    ("3x3.c256.14px", (256, 14, 14), (256, 256, 3, 3), dict(padding=1), False),
)
LENET_BATCH = 64
CANDIDATES = ("direct", "im2col", "fft", "winograd_f2x2_3x3", "winograd_f4x4_3x3", "auto")


@dataclass
class Row:
    """One algorithm on one layer; times in ms (None: not applicable or not run)."""

    layer: str
    algo: str
    forward_ms: float = None
    train_ms: float = None
    gflops: float = None
    error: float = None
    workspace_mb: float = None
    note: str = ""


def busy_fraction(interval=0.1):
    """Fraction of the machine's CPU time any process spent over ``interval`` s (Linux; else 0)."""

    def sample():
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except OSError:
        return 0.0
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def wait_until_idle(max_busy, patience):
    """Wait up to ``patience`` seconds for other processes to leave the CPUs; True if they did."""
    deadline = time.perf_counter() + patience
    while busy_fraction() > max_busy:
        if time.perf_counter() > deadline:
            return False
    return True


def interleaved_medians(fns, repeats, max_busy=None, patience=10.0, pause_before=(), pause=0.2):
    """Median seconds of each function over ``repeats`` interleaved rounds (after one warm-up).

    With ``max_busy`` (a fraction of all CPUs) every timed run first waits up to
    ``patience`` s until other processes use less, then runs once untimed, so timings come
    from quiet, warm moments. Before the functions at ``pause_before`` it sleeps ``pause``
    s: a framework handing over leaves BLAS threads spinning for up to ~0.1 s.
    """

    def settle(i):
        if max_busy is not None:
            wait_until_idle(max_busy, patience)
        if i in pause_before:
            time.sleep(pause)

    for i, fn in enumerate(fns):
        settle(i)
        fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            settle(i)
            if max_busy is not None:  # after a wait, caches and clocks are cold: run once more
                fn()
            start = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def _runners(make_tensor, no_grad_of, conv2d, x, w, b, dy, first):
    """(forward, forward+backward) closures of ``conv2d`` on one layer, with minidl's or
    PyTorch's ``tensor`` and ``no_grad``."""
    tx = make_tensor(x, requires_grad=not first)
    tw, tb = make_tensor(w, requires_grad=True), make_tensor(b, requires_grad=True)
    grad = make_tensor(dy)

    def forward():
        with no_grad_of():
            return conv2d(tx, tw, tb)

    def train():
        tx.grad = tw.grad = tb.grad = None
        conv2d(tx, tw, tb).backward(grad)

    return forward, train


def bench_layer(
    name, batch_size, algos=CANDIDATES, repeats=5, use_torch=True, seed=0, max_busy=None
):
    """Rows for one layer of ``LAYERS``: every algorithm in ``algos`` (+ "torch")."""
    _, x_shape, w_shape, kwargs, first = next(layer for layer in LAYERS if layer[0] == name)
    n = LENET_BATCH if name.startswith("lenet") else batch_size
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    geom = conv.make_geometry(x.shape, w.shape, **kwargs)
    dy = rng.standard_normal(geom.output_shape).astype(np.float32)
    x64, w64, b64 = (tensor(a, dtype="float64") for a in (x, w, b))
    with no_grad():
        y64 = conv.conv2d(x64, w64, b64, algo="im2col", **kwargs).numpy()
    conv.configure(enabled=True)  # the "auto" row measures the timing autotuner
    rows, runners = [], []
    for algo in algos:
        row = Row(name, algo)
        rows.append(row)
        if algo != "auto":
            row.note = implementation(algo).unsupported(geom.per_group()) or ""
            if row.note:
                continue
            row.workspace_mb = conv.workspace_bytes(algo, geom, "forward") / 2**20
        conv2d = functools.partial(conv.conv2d, algo=algo, **kwargs)
        runners.append((row, *_runners(tensor, no_grad, conv2d, x, w, b, dy, first)))
    torch = None
    if use_torch:
        with contextlib.suppress(ImportError):
            import torch
    if torch is not None:
        row = Row(name, "torch")
        rows.append(row)
        conv2d = functools.partial(torch.nn.functional.conv2d, **kwargs)
        runners.append((row, *_runners(torch.tensor, torch.no_grad, conv2d, x, w, b, dy, first)))
    for row, forward, _ in runners:
        row.error = float(np.abs(forward().numpy() - y64).max() / np.abs(y64).max())
    fns = [f for _, forward, train in runners for f in (forward, train)]
    switches = {0, len(fns) - 2} if torch is not None else set()  # into minidl, into torch
    seconds = interleaved_medians(fns, repeats, max_busy, pause_before=switches)
    flops = 2 * geom.direct_multiplies()
    for i, (row, _, _) in enumerate(runners):
        row.forward_ms, row.train_ms = 1e3 * seconds[2 * i], 1e3 * seconds[2 * i + 1]
        row.gflops = flops / seconds[2 * i] / 1e9
    choices = conv.choices()
    keys = {p: (geom, np.dtype("float32"), "cpu", p) for p in conv.PASSES}
    for row in rows:
        if row.algo == "auto":
            chosen = (f"{p}={choices[key].algorithm}" for p, key in keys.items() if key in choices)
            row.note = "chose " + ", ".join(chosen)
    return rows


def format_rows(rows):
    """A fixed-width table of ``Row`` objects."""
    head = (
        f"{'layer':14s} {'algorithm':18s} {'fwd ms':>8s} {'fwd+bwd ms':>10s} {'GFLOP/s':>8s} "
        f"{'max rel err':>11s} {'wksp MB':>8s}  note"
    )
    lines = [head, "-" * len(head)]

    def num(v, fmt):
        return format(v, fmt) if v is not None else "-"

    for r in rows:
        lines.append(
            f"{r.layer:14s} {r.algo:18s} {num(r.forward_ms, '8.2f')} {num(r.train_ms, '10.2f')} "
            f"{num(r.gflops, '8.1f')} {num(r.error, '11.1e')} {num(r.workspace_mb, '8.1f')}  "
            f"{r.note}"
        )
    return "\n".join(lines)
