"""Atomic file writes: readers see the old file or the complete new one, never half.

The data goes to a temporary file in the target's own folder (so the final
``os.replace`` is a rename within one file system, which POSIX makes atomic);
on any error the temporary file is removed and the target is left untouched.
"""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_write(path):
    """Open a temporary binary file next to ``path``; on success rename it to ``path``.

    Usage: ``with atomic_write(p) as f: f.write(data)``. The rename happens
    only when the block ends without an exception.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part", dir=folder)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; data files are meant to be shared
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
