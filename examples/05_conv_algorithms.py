"""Exercise: four ways to compute one convolution: how accurate, how fast, and why.

    python examples/05_conv_algorithms.py [--out conv_algorithms.png] [--batch-size 8]
            [--repeats 3] [--layers lenet.conv2,alexnet.conv3,3x3.c64.56px]

(``--layers lenet.conv2 --batch-size 1 --repeats 1``: a quick run of a few seconds.)

For a few layers (LeNet conv2, AlexNet conv3, a 3x3 layer at 56 px) it times
direct, im2col, FFT and both Winograd tiles (forward and forward+backward),
measures each one's error against a float64 direct convolution, and draws
both in one figure. Questions to answer from the plot and the code in
minidl/conv/:

1. direct and im2col do the same multiplies (Ben-Nun & Hoefler 2019, Table 6). Why is im2col
   faster? (Look at what the inner loop of each calls.)
2. Winograd F(4x4,3x3) does 4x fewer multiplies in its GEMM stage than
   direct, F(2x2,3x3) 2.25x. Compare the measured speed-ups: where does the
   rest of the time go? (Time ``transform_input`` alone.)
3. Why is F(4x4)'s error about ten times F(2x2)'s? (Look at the entries of B^T and G.)
4. The FFT's work does not grow with the kernel size. For which layer does it
   win, and what would make it win more often?
5. Which algorithm does ``algo="auto"`` choose per pass? (``print(md.conv.report())``)
"""

import argparse

import minidl as md
from minidl_app.conv_bench import bench_layer

LAYERS = ("lenet.conv2", "alexnet.conv3", "3x3.c64.56px")
ALGOS = ("direct", "im2col", "fft", "winograd_f2x2_3x3", "winograd_f4x4_3x3")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="conv_algorithms.png")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated layer names")
    args = parser.parse_args()
    layers = args.layers.split(",")

    results = {}
    for name in layers:
        rows = bench_layer(name, args.batch_size, ALGOS + ("auto",), args.repeats, use_torch=False)
        results[name] = {r.algo: r for r in rows}
        for r in rows:
            if r.forward_ms is not None:
                print(
                    f"{name:14s} {r.algo:18s} fwd {r.forward_ms:8.2f} ms"
                    f"  fwd+bwd {r.train_ms:8.2f} ms  error {r.error:.1e}  {r.note}"
                )
    print(md.conv.report())
    plot(results, layers, args.out)
    print(f"figure written to {args.out}")


def plot(results, layers, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, accuracy) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(ALGOS)
    for i, algo in enumerate(ALGOS):
        xs, times, errors = [], [], []
        for j, name in enumerate(layers):
            row = results[name][algo]
            if row.train_ms is not None:
                xs.append(j + (i - len(ALGOS) / 2 + 0.5) * width)
                times.append(row.train_ms)
                errors.append(row.error)
        speed.bar(xs, times, width, label=algo)
        accuracy.bar(xs, errors, width, label=algo)
    for ax, title, unit in (
        (speed, "forward + backward time", "ms"),
        (accuracy, "max |y - y_float64| / max |y_float64|", "relative error"),
    ):
        ax.set_xticks(range(len(layers)))
        ax.set_xticklabels(layers)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.set_xlabel("layer")
    speed.legend(fontsize=8)
    fig.suptitle(
        "Convolution algorithms (float32, CPU); missing bars: the algorithm cannot do the layer"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
