"""Every example's figure, drawn from small made-up data: labelled axes, units, a title.

The examples themselves run in ``tests/train/test_examples.py``; here only
their plotting functions are called, so the test takes a second.
"""

import importlib.util
import os
import re
from types import SimpleNamespace as Row

import numpy as np
import pytest

plt = pytest.importorskip("matplotlib.pyplot")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
TIME_WORDS = re.compile(r"\btime\b|\bseconds\b", re.IGNORECASE)
UNIT = re.compile(r"\((ms|s|bytes|B|ms per step)\)|\bseconds\b")


def example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def optimizers(tmp_path):
    rng = np.random.default_rng(0)
    curves = {r: (2 - np.linspace(0, 1, 60) + 0.1 * rng.random(60), 0.7) for r in ("sgd", "adam")}
    return example("04_compare_optimizers").plot(curves, 1000, tmp_path / "04.png")


def conv_algorithms(tmp_path):
    module = example("05_conv_algorithms")
    layers = ["lenet.conv1", "lenet.conv2"]
    results = {
        n: {a: Row(train_ms=1.0 + i, error=1e-6) for i, a in enumerate(module.ALGOS)}
        for n in layers
    }
    module.plot(results, layers, tmp_path / "05.png")
    return plt.gcf()


def allreduce_lab(tmp_path):
    from minidl import dist
    from minidl.perf.allreduce_cost import CostParams

    sizes = (1024, 65536)
    algorithms = list(dist.ALLREDUCE_ALGORITHMS)
    results = {n: {a: 1e-5 * (1 + n / 1e4) for a in algorithms} for n in sizes}
    params = CostParams(5e-6, 1e-10, 1e-10)
    return example("06_allreduce_lab").plot(tmp_path / "06.png", results, 2, params, algorithms)


def scaling(tmp_path):
    module = example("10_predict_scaling")
    points = [Row(nodes=n, speedup=n**0.8, valid=True) for n in module.NODES]
    module.plot({"LeNet-5": {"ring": points}, "AlexNet": {"ring": points}}, tmp_path / "10.png")
    return plt.gcf()


def pipeline(tmp_path):
    module = example("12_pipeline_schedules")
    event = Row(instruction=Row(op="forward", chunk=0), start=0.0, end=1.0)
    back = Row(instruction=Row(op="backward", chunk=0), start=1.0, end=3.0)
    measured = Row(timeline=[[event, back], [event, back]], bubble_fraction=0.2, ranks=2)
    module.draw([("gpipe", None, None, None, measured, [2.0, 1.0])], tmp_path / "12.png")
    return plt.gcf()


def layouts(tmp_path):
    rows = [("data (dp=2)", 10.0, 4e5, 4e5, 0.0), ("tensor (tp=2)", 20.0, 9e5, 9e5, 0.0)]
    return example("14_model_parallel_layouts").plot(rows, 2, tmp_path / "14.png")


def zero_memory(tmp_path):
    rows = [
        (s, (4e5 / (1 + (s > 2)), 4e5 / (1 + (s > 1)), 4e5 / (1 + (s > 0))), (4e5,) * 3, 0.0)
        for s in (0, 1, 2, 3)
    ]
    return example("15_zero_memory").plot(rows, 2, tmp_path / "15.png")


@pytest.mark.parametrize(
    "draw", [optimizers, conv_algorithms, allreduce_lab, scaling, pipeline, layouts, zero_memory]
)
def test_every_example_figure_has_labelled_axes_units_and_a_title(draw, tmp_path):
    plt.close("all")
    fig = draw(tmp_path)
    assert any(p.suffix == ".png" and p.stat().st_size > 0 for p in tmp_path.iterdir())
    titles = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        titles.append(ax.get_title())
        labels = [ax.get_ylabel()]
        if ax.get_subplotspec().is_last_row():
            labels.append(ax.get_xlabel())
        assert all(labels), f"{draw.__name__}: an axis without a label: {labels}"
        for label in labels:
            if TIME_WORDS.search(label):
                assert UNIT.search(label), f"{draw.__name__}: no unit in {label!r}"
    assert any(titles), f"{draw.__name__}: no title"
    plt.close("all")


def test_every_example_that_saves_a_figure_is_drawn_here():
    drawn = {"04", "05", "06", "10", "12", "14", "15"}
    saving = {
        name[:2]
        for name in os.listdir(EXAMPLES)
        if name.endswith(".py") and "savefig" in open(os.path.join(EXAMPLES, name)).read()
    }
    assert saving == drawn


def test_the_optimizer_curves_start_at_the_end_of_their_first_window(tmp_path):
    fig = optimizers(tmp_path)
    line = fig.axes[0].get_lines()[0]
    window = example("04_compare_optimizers").WINDOW
    assert line.get_xdata()[0] == window and line.get_xdata()[-1] == 60
    assert "test accuracy" in fig.axes[0].get_legend().get_title().get_text()


def test_coinciding_model_lines_are_told_apart_and_the_model_gap_is_explained(tmp_path):
    fig = allreduce_lab(tmp_path)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "rabenseifner (model = ring's at P=2)" in labels
    assert any("dominated by per-call costs" in t.get_text() for t in fig.texts)
