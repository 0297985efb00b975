"""The downloader and ``minidl data``, against a local HTTP server on 127.0.0.1 only."""

import dataclasses
import hashlib
import http.server
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from minidl.data import DownloadError, FashionMNIST, download
from minidl.data.catalog import FASHION_MNIST
from minidl_app.cli import main

NAMES = FASHION_MNIST.all_files()
DEBIAN = Path("/usr/share/datasets/fashion-mnist")


def _hashes(folder):
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in NAMES}


@pytest.fixture
def served(http_folder, fake_dataset):
    """Synthetic Fashion-MNIST files on the local server: (folder, url, their SHA-256s)."""
    folder, url = http_folder
    fake_dataset(folder, n_train=8, n_test=3)
    return folder, url, _hashes(folder)


def test_download_verifies_and_places_files(served, tmp_path):
    folder, url, hashes = served
    dest = download("fashion-mnist", tmp_path / "dest", base_url=url, checksums=hashes)
    assert sorted(os.listdir(dest)) == sorted(NAMES)  # no temporary files left behind
    for name in NAMES:
        assert (dest / name).read_bytes() == (folder / name).read_bytes()
    assert (
        len(FashionMNIST(root=dest, verify=False)) == 8
    )  # synthetic files, not the published ones


def test_present_files_are_kept_and_bad_ones_replaced(served, tmp_path):
    folder, url, hashes = served
    dest = download("fashion-mnist", tmp_path / "dest", base_url=url, checksums=hashes)
    (dest / NAMES[0]).write_bytes(b"damaged")
    (folder / NAMES[1]).unlink()  # would 404, but the good copy in dest is kept
    download("fashion-mnist", dest, base_url=url, checksums=hashes)
    assert (dest / NAMES[0]).read_bytes() == (folder / NAMES[0]).read_bytes()


def test_hash_mismatch_leaves_no_file(served, tmp_path):
    folder, url, hashes = served
    wrong = dict(hashes, **{NAMES[2]: "0" * 64})
    dest = tmp_path / "dest"
    with pytest.raises(DownloadError) as info:
        download("fashion-mnist", dest, base_url=url, checksums=wrong)
    message = str(info.value)
    assert f"{url}{NAMES[2]}" in message and "SHA-256 mismatch" in message
    assert "0" * 64 in message and hashes[NAMES[2]] in message
    assert sorted(os.listdir(dest)) == sorted(NAMES[:2])


def test_http_404_is_a_clear_error(served, tmp_path):
    folder, url, hashes = served
    (folder / NAMES[3]).unlink()
    dest = tmp_path / "dest"
    with pytest.raises(DownloadError, match="HTTP error 404") as info:
        download("fashion-mnist", dest, base_url=url, checksums=hashes)
    assert f"{url}{NAMES[3]}" in str(info.value)
    assert NAMES[3] not in os.listdir(dest) and len(os.listdir(dest)) == 3


def test_unreachable_server(tmp_path):
    with socket.socket() as bound_not_listening:  # connections to it are refused
        bound_not_listening.bind(("127.0.0.1", 0))
        port = bound_not_listening.getsockname()[1]
        with pytest.raises(DownloadError, match="cannot connect") as info:
            download("mnist", tmp_path, base_url=f"http://127.0.0.1:{port}/", timeout=5)
    assert f"http://127.0.0.1:{port}/train-images-idx3-ubyte.gz" in str(info.value)
    assert os.listdir(tmp_path) == []


class _ShortBodyHandler(http.server.BaseHTTPRequestHandler):
    """Promises 1000 bytes, sends 10, hangs up: a connection lost mid-file."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"0123456789")
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_connection_lost_mid_file(tmp_path, local_server):
    with local_server(_ShortBodyHandler) as url:
        with pytest.raises(
            DownloadError, match="connection lost after 10 of 1000 bytes; nothing was saved"
        ) as info:
            download("mnist", tmp_path, base_url=url)
    assert f"{url}train-images-idx3-ubyte.gz" in str(info.value)
    assert os.listdir(tmp_path) == []


class _StallingHandler(_ShortBodyHandler):
    """Sends the headers and a little data, then stalls past the client's timeout."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"0123456789")
        self.wfile.flush()
        time.sleep(1.0)


def test_stalled_server_times_out(tmp_path, local_server):
    with local_server(_StallingHandler) as url:
        with pytest.raises(DownloadError, match="download failed.*timed out"):
            download("mnist", tmp_path, base_url=url, timeout=0.2)
    assert os.listdir(tmp_path) == []


def test_environment_variable_sets_the_base_url(served, tmp_path, monkeypatch):
    folder, url, hashes = served
    shutil.copytree(folder, folder / "fashion-mnist")  # served as <url>fashion-mnist/<file>
    monkeypatch.setenv("MINIDL_DATA_URL", url + "{name}")
    dest = download("fashion-mnist", tmp_path / "dest", checksums=hashes)
    assert sorted(os.listdir(dest)) == sorted(NAMES)


def test_dataset_download_true_goes_to_the_cache(served, tmp_path, monkeypatch):
    folder, url, hashes = served
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MINIDL_DATA", raising=False)
    spec = dataclasses.replace(
        FASHION_MNIST, debian_dirs=(), sha256=hashes, raw_sha256={}, fingerprints={}, base_url=url
    )  # synthetic files: only the download's own hashes apply
    monkeypatch.setattr(FashionMNIST, "spec", spec)
    data = FashionMNIST(train=False, download=True)
    assert len(data) == 3 and data.root == tmp_path / "xdg" / "minidl" / "fashion-mnist"


def test_cli_download_of_real_files_and_where(http_folder, tmp_path, monkeypatch, capsys):
    if not all((DEBIAN / name).is_file() for name in NAMES):
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    folder, url = http_folder
    for name in NAMES:
        os.symlink(DEBIAN / name, folder / name)
    dest = tmp_path / "dest"
    assert main(["data", "download", "fashion-mnist", "--dir", str(dest), "--url", url]) == 0
    assert str(dest) in capsys.readouterr().out
    assert _hashes(dest) == FASHION_MNIST.sha256  # the published values, checked independently
    assert main(["data", "where", "fashion-mnist", "--data-dir", str(dest)]) == 0
    assert capsys.readouterr().out.strip() == str(dest)


def test_cli_reports_failures(served, tmp_path, monkeypatch, capsys):
    folder, url, hashes = served
    dest = tmp_path / "dest"
    assert main(["data", "download", "fashion-mnist", "--dir", str(dest), "--url", url]) == 1
    assert "SHA-256 mismatch" in capsys.readouterr().err  # synthetic files, published hashes
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MINIDL_DATA", raising=False)
    assert main(["data", "where", "mnist", "--data-dir", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert "MNIST not found" in err and str(tmp_path / "none") in err


def test_unknown_dataset_name():
    with pytest.raises(ValueError, match="unknown dataset 'cifar'.*fashion-mnist"):
        download("cifar")
