"""Fixtures for the data tests: synthetic IDX dataset folders and a local HTTP server."""

import contextlib
import functools
import http.server
import threading

import numpy as np
import pytest

from minidl.data.idx import save_idx

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def write_fake_dataset(folder, n_train=6, n_test=4, compressed=True, seed=0):
    """Write four small IDX files (28x28 uint8 images, labels 0..9) to ``folder``; return
    the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        for name, array in zip(FILES[split], (images, labels)):
            path = folder / (name if compressed else name[:-3])
            save_idx(path, array, compress=compressed)
        arrays[split] = (images, labels)
    return arrays


@pytest.fixture
def fake_dataset():
    """The ``write_fake_dataset(folder, n_train, n_test, compressed, seed)`` helper."""
    return write_fake_dataset


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(handler):
    """Run ``handler`` on 127.0.0.1 at a free port in a thread; yields the base URL; always
    stops."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def local_server(monkeypatch):
    """``local_server(handler)``: the ``serve`` context manager, with proxies bypassed."""
    for name in ("no_proxy", "NO_PROXY"):  # never route the loopback through a proxy
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    return serve


@pytest.fixture
def http_folder(tmp_path, local_server):
    """Serve a fresh folder on 127.0.0.1 (a free port); yields (folder, base URL)."""
    folder = tmp_path / "served"
    folder.mkdir()
    with local_server(functools.partial(_QuietHandler, directory=str(folder))) as url:
        yield folder, url
