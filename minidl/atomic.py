"""Atomic file writes: readers see the old file or the complete new one, never half.

The data goes to a temporary file ``.<name>.minidl-<pid>-<random>.part`` in
the target's own folder (so the final ``os.replace`` is a rename within one
file system, which POSIX makes atomic); it is created exclusively
(``O_EXCL``) under a name no other process picks and no user file has
by accident. On any error the temporary file is removed and the target is
left untouched, and the error names the file (a full disk says which file it
could not write). A process killed mid-write leaves its temporary file
behind: ``remove_stale_parts`` clears them, and nothing else.
"""

import contextlib
import glob
import os
import re
import tempfile

PART_SUFFIX = ".part"
PART_MARKER = ".minidl-"
# .<name>.minidl-<pid>-<random>.part, as atomic_write names them (mkstemp's random part)
_OWN_PART = re.compile(r"\..+\.minidl-\d+-\w+\.part")


@contextlib.contextmanager
def atomic_write(path):
    """Open a temporary binary file next to ``path``; on success rename it to ``path``.

    Usage: ``with atomic_write(p) as f: f.write(data)``. The rename happens
    only when the block ends without an exception.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}{PART_MARKER}{os.getpid()}-"
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=PART_SUFFIX, dir=folder)
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
    """Delete the temporary files of ``atomic_write`` in ``folder``; returns their paths.

    Only files named as ``atomic_write`` names them go (a user's
    ``.movie.mkv.part`` stays). A temporary file of a write still under way
    goes too: call it only while no other process writes into ``folder``
    (a run folder: while holding its lock, ``minidl_app.rundir``).
    """
    removed = []
    pattern = os.path.join(glob.escape(os.fspath(folder)), f".*{PART_MARKER}*{PART_SUFFIX}")
    for tmp in glob.glob(pattern):
        if not _OWN_PART.fullmatch(os.path.basename(tmp)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
            removed.append(tmp)
    return removed
