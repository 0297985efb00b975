"""Every notebook in notebooks/ runs top to bottom headless and shows at least one figure."""

import os
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")
NOTEBOOKS = sorted(name for name in os.listdir(FOLDER) if name.endswith(".ipynb"))
TOPICS = (
    "autograd",
    "convolution_algorithms",
    "optimizers",
    "data_parallelism_and_allreduce",
    "consistency_models",
    "compression",
    "performance_models",
)
LIMIT_S = 60  # each notebook, on 2 shared cores


def test_there_is_one_notebook_per_topic():
    assert [name[3:-6] for name in NOTEBOOKS] == list(TOPICS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_notebook_runs_headless_and_shows_its_figures(name, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    book = nbformat.read(os.path.join(FOLDER, name), as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(
        book, timeout=LIMIT_S, kernel_name="python3", resources={"metadata": {"path": FOLDER}}
    ).execute()
    seconds = time.perf_counter() - start
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the notebook shows no figure"
    loaded = next(o for o in outputs if o.output_type == "stream")
    assert os.path.samefile(
        loaded.text.strip().splitlines()[0],
        os.path.join(FOLDER, os.pardir, "minidl", "__init__.py"),
    )
    assert seconds < LIMIT_S
