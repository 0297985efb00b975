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


def write_image_folder(root, seed=0, corrupt=True, flat_val=False):
    """A small ImageNet-style folder: train/{ant,bee,cat}/ and val/, JPEG and PNG, several sizes,
    grey and RGB images, and (``corrupt``) one file in train/bee that is not an image.

    Returns {"train": [(path, label)], "val": [(path, label)], "corrupt": path or None}.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    sizes = [(300, 260), (260, 400), (96, 80), (512, 256), (280, 280)]
    made = {"train": [], "val": [], "corrupt": None}
    for split, per_class in (("train", 5), ("val", 2)):
        for label, name in enumerate(("ant", "bee", "cat")):
            folder = root / split if split == "val" and flat_val else root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(per_class):
                width, height = sizes[(k + label) % len(sizes)]
                pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
                pixels[..., label] //= 4  # each class lacks one colour: learnable
                image = Image.fromarray(pixels)
                if (k + label) % 4 == 3:
                    image = image.convert("L")
                suffix = ".JPEG" if k % 2 == 0 else ".png"
                path = folder / f"{split}_{name}_{k}{suffix}"
                image.save(path, quality=90) if suffix == ".JPEG" else image.save(path)
                made[split].append((path, label))
    if flat_val:
        lines = [f"{path.name} {('ant', 'bee', 'cat')[label]}" for path, label in made["val"]]
        (root / "val_labels.txt").write_text("\n".join(lines) + "\n")
    if corrupt:
        made["corrupt"] = root / "train" / "bee" / "zz_broken.JPEG"
        made["corrupt"].write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    return made


@pytest.fixture
def image_folder(tmp_path, monkeypatch):
    """``image_folder(**options)``: ``write_image_folder`` into a fresh folder (Pillow needed),
    with the colour-statistics cache in the test's own folder; returns (root, made)."""
    pytest.importorskip("PIL")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def make(**options):
        root = tmp_path / "images"
        return root, write_image_folder(root, **options)

    return make
