"""How far does data-parallel SGD scale? AlexNet and GoogLeNet in Keuper & Pfreundt's setting.

Keuper & Pfreundt (2016) trained AlexNet (B = 256) and GoogLeNet (B = 32)
with MPI Caffe on nodes with a K80 GPU and FDR InfiniBand, and found that
scaling stalls after a few nodes: the gradient exchange outgrows the
shrinking compute time, the local batch b = B/n becomes too small for
efficient matrix products, and B itself caps n. This script rebuilds that
analysis with ``minidl.perf``:

1. counts both networks layer by layer (``count_model``);
2. turns the counts into per-layer compute times with a K80 roofline,
   scaled to their Table I times per iteration (0.9 s and 0.36 s);
3. predicts time per iteration, speedup and efficiency for 1..512 nodes
   with several exchange schemes, and says where and why scaling stalls;
4. plots predicted speedup against nodes (PNG).

GoogLeNet is written out below as minidl layers from Szegedy et al. (2015),
Table 1 (the inception widths), with the auxiliary classifiers of Caffe's
bvlc_googlenet that Keuper & Pfreundt trained (their ~50 MB model): 13.4M
parameters, ~1.6 G multiply-accumulates per 224x224 image.

Run: ``python examples/10_predict_scaling.py [--out DIR]`` (about 10 s).
"""

import argparse
import os

from minidl import functional as F
from minidl import layers as L
from minidl.perf import count_model
from minidl.perf.compute_model import RooflineCompute
from minidl.perf.machine import PRESETS
from minidl.perf.network import NETWORKS, Network
from minidl.perf.predict import explain, format_prediction, predict_scaling
from minidl.perf.summary import human_bytes
from minidl.perf.zoo import build_named

NODES = [2**k for k in range(10)]


def conv_relu(cin, cout, k, stride=1, padding=0):
    return [L.Conv2d(cin, cout, k, stride=stride, padding=padding), L.ReLU()]


class Inception(L.Module):
    """Four branches joined along the channels: 1x1 | 1x1-3x3 | 1x1-5x5 | pool-1x1."""

    def __init__(self, cin, c1, c3_reduce, c3, c5_reduce, c5, pool_proj):
        super().__init__()
        self.branch1 = L.Sequential(*conv_relu(cin, c1, 1))
        self.branch3 = L.Sequential(
            *conv_relu(cin, c3_reduce, 1), *conv_relu(c3_reduce, c3, 3, padding=1)
        )
        self.branch5 = L.Sequential(
            *conv_relu(cin, c5_reduce, 1), *conv_relu(c5_reduce, c5, 5, padding=2)
        )
        self.branch_pool = L.Sequential(
            L.MaxPool2d(3, stride=1, padding=1), *conv_relu(cin, pool_proj, 1)
        )

    def forward(self, x):
        return F.concatenate(
            [self.branch1(x), self.branch3(x), self.branch5(x), self.branch_pool(x)], axis=1
        )


def auxiliary_head(cin, num_classes=1000):
    """Caffe's loss1/loss2 classifier: avg pool 5/3, 1x1 conv 128, fc 1024, dropout 0.7, fc."""
    return L.Sequential(
        L.AvgPool2d(5, stride=3),
        *conv_relu(cin, 128, 1),
        L.Flatten(),
        L.Linear(128 * 4 * 4, 1024),
        L.ReLU(),
        L.Dropout(0.7),
        L.Linear(1024, num_classes),
    )


class GoogLeNet(L.Module):
    """GoogLeNet (Szegedy et al. 2015, Table 1) for 3x224x224 inputs.

    Pools use padding 1 where Caffe rounds the output size up, so the maps
    are 112, 56, 28, 14 and 7 pixels wide as in the paper. The auxiliary
    heads run in ``forward`` (their logits are kept in ``aux_logits``) so that
    counts and timings include them, as in training.
    """

    def __init__(self, num_classes=1000):
        super().__init__()
        pool = lambda: L.MaxPool2d(3, stride=2, padding=1)  # noqa: E731
        lrn = lambda: L.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)  # noqa: E731
        self.stem = L.Sequential(
            *conv_relu(3, 64, 7, stride=2, padding=3),
            pool(),
            lrn(),
            *conv_relu(64, 64, 1),
            *conv_relu(64, 192, 3, padding=1),
            lrn(),
            pool(),
        )
        self.stage3 = L.Sequential(
            Inception(192, 64, 96, 128, 16, 32, 32),
            Inception(256, 128, 128, 192, 32, 96, 64),
            pool(),
        )
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.aux1 = auxiliary_head(512, num_classes)
        self.stage4 = L.Sequential(
            Inception(512, 160, 112, 224, 24, 64, 64),
            Inception(512, 128, 128, 256, 24, 64, 64),
            Inception(512, 112, 144, 288, 32, 64, 64),
        )
        self.aux2 = auxiliary_head(528, num_classes)
        self.stage5 = L.Sequential(
            Inception(528, 256, 160, 320, 32, 128, 128),
            pool(),
            Inception(832, 256, 160, 320, 32, 128, 128),
            Inception(832, 384, 192, 384, 48, 128, 128),
        )
        self.head = L.Sequential(
            L.AvgPool2d(7), L.Flatten(), L.Dropout(0.4), L.Linear(1024, num_classes)
        )

    def forward(self, x):
        x = self.inception4a(self.stage3(self.stem(x)))
        first = self.aux1(x)
        x = self.stage4(x)
        self.aux_logits = (first, self.aux2(x))
        return self.head(self.stage5(x))


def study(name, costs, global_batch, seconds, network, schemes):
    """Predictions for one network on a K80 roofline scaled to ``seconds`` per iteration at B."""
    compute = RooflineCompute(costs, PRESETS["k80"]).calibrated(global_batch, seconds)
    nbytes = 4 * costs.num_parameters
    print(
        f"\n=== {name}: {costs.num_parameters:,} parameters ({human_bytes(nbytes)} of gradients), "
        f"{costs.total('macs') / 1e9:.2f} GMAC per image, B={global_batch}, "
        f"{seconds} s per iteration on one node"
    )
    curves = {}
    for label, scheme, net, compression in schemes:
        points = predict_scaling(compute, global_batch, NODES, nbytes / compression, net, scheme)
        curves[label] = points
        if label in ("tree (their Fig. 3)", "ring"):
            print(f"\n{label} over {net.bandwidth / 1e9:g} GB/s:")
            print(format_prediction(points))
            for line in explain(points, compute, global_batch, nbytes / compression, scheme, 0.0):
                print("- " + line)
    return curves


def plot(curves_by_model, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves_by_model), figsize=(6 * len(curves_by_model), 4.5))
    for ax, (title, curves) in zip(axes, curves_by_model.items()):
        for label, points in curves.items():
            valid = [p for p in points if p.valid]
            ax.plot(
                [p.nodes for p in valid], [p.speedup for p in valid], marker="o", ms=3, label=label
            )
        ax.plot(NODES, NODES, "k:", lw=1, label="linear")
        ax.set(
            xscale="log", yscale="log", xlabel="nodes n", ylabel="predicted speedup", title=title
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/predict_scaling", help="folder for the PNG")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    alexnet, shape = build_named("alexnet-original")
    alexnet_costs = count_model(alexnet, shape, batch=1)
    googlenet_costs = count_model(GoogLeNet(), (3, 224, 224), batch=1)

    ib = NETWORKS["fdr-infiniband"]
    free = Network(0.0, float("inf"))
    schemes = [
        ("tree (their Fig. 3)", "tree", ib, 1),
        ("ring", "ring", ib, 1),
        ("parameter server", "ps", ib, 1),
        ("tree, 8-bit gradients", "tree", ib, 4),
        ("free communication (their Fig. 4)", "ring", free, 1),
    ]
    curves = {
        "AlexNet, B=256, K80 + FDR IB": study("AlexNet", alexnet_costs, 256, 0.9, ib, schemes),
        "GoogLeNet, B=32, K80 + FDR IB": study("GoogLeNet", googlenet_costs, 32, 0.36, ib, schemes),
    }
    # their Fig. 11: a global batch of 4096 keeps b >= 16 up to 256 nodes
    # (speedups relative to B=4096)
    big = RooflineCompute(alexnet_costs, PRESETS["k80"]).calibrated(256, 0.9)
    curves["AlexNet, B=4096 vs 256, free communication"] = {
        f"B={b}": predict_scaling(big, b, NODES, 0, free) for b in (256, 1024, 4096)
    }
    plot(curves, os.path.join(args.out, "predicted_speedup.png"))


if __name__ == "__main__":
    main()
