"""Download a dataset's files into the cache, verifying each SHA-256 before it lands.

Each file streams into a temporary file beside its target while it is hashed;
only a file whose SHA-256 matches is renamed into place (``os.replace``), so
the folder never holds a partial or wrong file. The base URL can be pointed
at a mirror with ``base_url=`` or ``$MINIDL_DATA_URL`` (a ``{name}`` in it is
replaced by the dataset name, e.g. ``https://mirror.example/{name}/``).
"""

import hashlib
import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path

from ..atomic import atomic_write
from .catalog import get_spec
from .locate import cache_dir

URL_ENV = "MINIDL_DATA_URL"
CHUNK = 1 << 20


class DownloadError(OSError):
    """A download failed (HTTP or network error, or a SHA-256 mismatch); names the URL."""


def file_sha256(path):
    """SHA-256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_base_url(spec, base_url=None):
    """``base_url``, else ``$MINIDL_DATA_URL``, else the dataset's own; ends with '/'."""
    url = base_url or os.environ.get(URL_ENV) or spec.base_url
    url = url.replace("{name}", spec.name)
    return url if url.endswith("/") else url + "/"


def fetch_verified(url, target, sha256, timeout=60):
    """Fetch ``url`` to ``target`` atomically; ``DownloadError`` unless its SHA-256 is
    ``sha256``."""
    digest, received = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, atomic_write(target) as out:
            for chunk in iter(lambda: response.read(CHUNK), b""):
                digest.update(chunk)
                out.write(chunk)
                received += len(chunk)
            promised = response.headers.get("Content-Length")
            if promised is not None and int(promised) != received:
                raise DownloadError(
                    f"{url}: connection lost after {received} of {promised} "
                    "bytes; nothing was saved, try again"
                )
            if digest.hexdigest() != sha256:
                raise DownloadError(
                    f"{url}: SHA-256 mismatch: expected {sha256}, got {digest.hexdigest()}; "
                    "the file was not saved (a damaged download or a wrong mirror)"
                )
    except DownloadError:
        raise
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{url}: HTTP error {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise DownloadError(
            f"{url}: cannot connect ({exc.reason}); are you online? set {URL_ENV} to use a mirror"
        ) from exc
    except (OSError, http.client.HTTPException) as exc:  # a reset, a timeout, a short read
        raise DownloadError(f"{url}: download failed ({exc!r}); nothing was saved") from exc


def download(name, directory=None, base_url=None, checksums=None, timeout=60, log=None):
    """Download dataset ``name`` (or a ``DatasetSpec``) into ``directory`` (default: the cache).

    Files already present with the right SHA-256 are kept. ``checksums`` (file
    name -> SHA-256) replaces the dataset's published values, for mirrors of
    other files and for tests. ``log`` (e.g. ``print``) is told each step.
    Returns the folder.
    """
    spec = get_spec(name)
    log = log or (lambda message: None)
    checksums = dict(spec.sha256 if checksums is None else checksums)
    directory = Path(directory) if directory else cache_dir(spec)
    directory.mkdir(parents=True, exist_ok=True)
    base = resolve_base_url(spec, base_url)
    for file_name in spec.all_files():
        if file_name not in checksums:
            raise DownloadError(
                f"{spec.title}: no SHA-256 known for {file_name}; refusing "
                "to download it unverified"
            )
        target = directory / file_name
        if target.is_file() and file_sha256(target) == checksums[file_name]:
            log(f"{target}: present, SHA-256 ok")
            continue
        log(f"{base}{file_name} -> {target}")
        fetch_verified(base + file_name, target, checksums[file_name], timeout)
    return directory
