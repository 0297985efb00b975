"""Atomic file writes: readers see the old file or the complete new one, never half.

The data goes to a temporary file ``.<name>.<random>.part`` in the target's
own folder (so the final ``os.replace`` is a rename within one file system,
which POSIX makes atomic); on any error the temporary file is removed and the
target is left untouched, and the error names the file (a full disk says
which file it could not write). A process killed mid-write leaves its
temporary file behind: ``remove_stale_parts`` clears them.
"""

import contextlib
import glob
import os
import tempfile

PART_SUFFIX = ".part"


@contextlib.contextmanager
def atomic_write(path):
    """Open a temporary binary file next to ``path``; on success rename it to ``path``.

    Usage: ``with atomic_write(p) as f: f.write(data)``. The rename happens
    only when the block ends without an exception.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=PART_SUFFIX, dir=folder)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; data files are meant to be shared
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise naming_error(exc, path, "the previous version, if any, is intact") from exc
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def naming_error(exc, path, consequence):
    """An ``OSError`` like ``exc`` whose message names ``path`` (a full disk, a read-only folder).

    Errors without an errno are not the file system's (a download's checksum, a
    timeout raised by the writer's own code): they are returned as they are.
    """
    if exc.errno is None or str(path) in str(exc):
        return exc
    what = exc.strerror or str(exc)
    return type(exc)(exc.errno, f"could not write {path}: {what} ({consequence})")


def remove_stale_parts(folder):
    """Delete the temporary files that interrupted ``atomic_write`` calls left in ``folder``."""
    removed = []
    for tmp in glob.glob(os.path.join(glob.escape(os.fspath(folder)), f".*{PART_SUFFIX}")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
            removed.append(tmp)
    return removed
