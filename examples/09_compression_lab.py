"""Compression lab: what each gradient compressor costs in bytes and in convergence (no MPI).

    python examples/09_compression_lab.py [--steps 2000] [--dim 500] [--lr 0.03]

Gradient descent on a least-squares problem f(w) = ||A w - b||^2 / (2m),
with the gradient passed through each compressor of minidl.dist.compression
before the update, as a rank would send it. Things to look for: fp16 is
harmless; the unbiased QSGD and TernGrad converge, noisier the fewer bits
they keep; top-k and 1-bit sign without error feedback stall, because what
they drop is lost for good, and with error feedback (the residual carried
to the next step) they converge on a few percent of the bytes. Error
feedback delays a coordinate until it is large enough to be sent (about
1 / ratio steps for top-k), so it needs a step size small against that
delay: try --lr 0.5 and watch top-k with feedback diverge.
"""

import argparse

import numpy as np

from minidl.dist.compression import GradientEncoder
from minidl.perf.telemetry import format_table
from minidl_app.cli.specs import parse_compression

SCHEMES = [
    ("none", None),
    ("fp16", None),
    ("qsgd:8", None),
    ("qsgd:2", None),
    ("terngrad", None),
    ("topk:0.01", False),
    ("topk:0.01", True),
    ("sign", False),
    ("sign", True),
]


def problem(dim, seed=0):
    """A well-conditioned random least-squares problem and its solution."""
    rng = np.random.default_rng(seed)
    m = 2 * dim
    a = (rng.standard_normal((m, dim)) / np.sqrt(m)).astype(np.float32)
    w_star = rng.standard_normal(dim).astype(np.float32)
    return a, a @ w_star, w_star


def descend(a, b, w_star, scheme, error_feedback, steps, lr):
    """Relative distance to the solution after ``steps`` compressed-gradient steps."""
    w = np.zeros(a.shape[1], dtype=np.float32)
    encoder = GradientEncoder(
        parse_compression(scheme), w.size, error_feedback=error_feedback, seed=1
    )
    for _ in range(steps):
        grad = a.T @ (a @ w - b)
        _, sent = encoder.encode(grad.astype(np.float32))
        w -= lr * sent
    return float(np.linalg.norm(w - w_star) / np.linalg.norm(w_star)), encoder.wire_bytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.03)
    args = parser.parse_args()
    a, b, w_star = problem(args.dim)
    rows = []
    for scheme, feedback in SCHEMES:
        error, nbytes = descend(a, b, w_star, scheme, feedback, args.steps, args.lr)
        encoder = GradientEncoder(parse_compression(scheme), args.dim, error_feedback=feedback)
        rows.append(
            {
                "scheme": scheme,
                "feedback": "on" if encoder.residual is not None else "off",
                "bytes": nbytes,
                "share": 100 * nbytes / (4 * args.dim),
                "error": error,
            }
        )
    print(f"least squares, {args.dim} unknowns, {args.steps} steps of lr {args.lr}")
    print(
        format_table(
            rows,
            [
                ("scheme", "scheme", "{}"),
                ("error feedback", "feedback", "{}"),
                ("bytes/step", "bytes", "{}"),
                ("% of fp32", "share", "{:.1f}"),
                ("||w - w*|| / ||w*||", "error", "{:.2e}"),
            ],
        )
    )


if __name__ == "__main__":
    main()
