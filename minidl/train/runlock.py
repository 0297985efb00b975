"""One writer per run folder: a lock that a run holds from its first write to its end.

``FolderLock(folder).acquire()`` takes ``fcntl.flock`` on ``folder/.minidl.lock``
without waiting: a second process (or a second lock in the same process)
that asks for the folder while it is held gets ``RunFolderBusy`` at once,
naming the holder's PID and host, which the holder writes into the file.
The kernel drops the lock when the holder's file is closed, however the
process ends (a crash, ``kill -9``), so a dead run never blocks a folder.

The holder removes the lock file when it gives the lock up (a crashed
holder leaves it behind, unlocked, and harmless). A process that opened the
file just before it was removed would lock a file without a name, beside a
newcomer locking a new one: so a lock counts only when the locked file is
still the one at ``.minidl.lock``, and otherwise is taken again. ``flock``
locks are advisory and local to one machine's kernel: on a network file
system shared by several machines they may not exclude each other.
"""

import fcntl
import os
import socket
import time

from .config import option

LOCK_NAME = ".minidl.lock"
HOLDER_WAIT_S = 0.5  # how long a refused process waits for a new holder to write its name


class RunFolderBusy(OSError):
    """The run folder is being written by another run (its lock is held)."""


class FolderLock:
    """The lock of one run folder; ``held`` while this object holds it."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self._fd = None

    @property
    def held(self):
        return self._fd is not None

    def acquire(self):
        """Take the lock now or raise ``RunFolderBusy``; returns self. The folder must exist."""
        if self._fd is not None:
            return self
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise RunFolderBusy(
                    f"{self.folder} is being written by another run ({holder}); a run folder "
                    f"has one writer at a time: wait until that run ends (or stop it), or "
                    f"choose another {option('out')}"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                self._fd = fd
            else:  # the holder before us removed the file we locked: lock the new one
                os.close(fd)
        text = f"{os.getpid()} {socket.gethostname()}\n".encode()
        os.pwrite(self._fd, text, 0)  # one write: a reader sees the old name or this one, whole
        os.ftruncate(self._fd, len(text))
        return self

    def release(self):
        """Remove the lock file and give the lock up (nothing happens when it is not held)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.unlink(self.path)  # while still locked: see the module's docstring
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)  # closing the file drops the flock

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def _same_file(fd, path):
    """Whether the open file ``fd`` is the file at ``path`` now."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


def _holder(fd):
    """``PID 123 on host h`` from the lock file, waiting briefly for a holder just starting."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        first = os.pread(fd, 256, 0).decode(errors="replace").partition("\n")[0].split()
        if len(first) == 2:
            return f"PID {first[0]} on host {first[1]}"
        if time.monotonic() > deadline:
            return "PID and host not known yet: it is starting"
        time.sleep(0.01)
