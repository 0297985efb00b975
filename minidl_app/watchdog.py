"""A hang watchdog for MPI jobs: a rank that makes no progress for too long aborts the job.

MPI calls have no timeout: a rank that is stopped (SIGSTOP), deadlocked, or
waiting for such a rank blocks, and then every other rank blocks in its next
collective, for ever. The training code calls ``progress(where)`` whenever it
gets something done (a step, an evaluated batch, a served message); each
rank's ``Watchdog`` thread (which runs while the main thread waits inside
MPI: mpi4py releases the interpreter lock) aborts the job when ``timeout``
seconds pass without a call, saying which rank stalled and where, and (with a
``Heartbeat``) which ranks and hosts stopped answering; rank 0 records that
reason in its run folder (``minidl_app/rundir.py``).

Heartbeats (``Heartbeat``): MPI cannot tell a rank that waits for a peer whether the peer
is slow, stopped or gone, so every ``INTERVAL_S`` each rank sends every other rank one UDP
datagram (its rank, how long ago it last made progress, and where). When the watchdog
gives up, ``describe()`` sorts the peers into those *not heard from* (process, host or link
gone) and those *heard from but stalled*. Ranks all on one host use 127.0.0.1; otherwise
each sends to the address its peer's hostname resolves to (one that does not resolve is
reported as unknown).
"""

import os
import signal
import socket
import struct
import sys
import threading
import time

from minidl.dist.job import job_aborted
from minidl.train.callbacks import Callback

_last = {"time": time.monotonic(), "where": "start-up"}


def progress(where=None):
    """Record that this rank got something done (cheap: call it once per step)."""
    _last["time"] = time.monotonic()
    if where is not None:
        _last["where"] = where


def idle():
    """(seconds since this rank last called ``progress``, where it was)."""
    return time.monotonic() - _last["time"], _last["where"]


class Watchdog(Callback):
    """Abort the job through ``abort(code)`` (``Communicator.abort``) when ``progress`` was not
    called for ``timeout`` s. As a loop callback, every step and evaluated batch is progress.
    ``option(field)`` names an option in its message (the command line passes its flags)."""

    def __init__(self, timeout, rank, abort, exit_code=124, option=str):
        if not timeout > 0:
            raise ValueError(f"watchdog timeout must be positive, got {timeout}")
        self.timeout, self.rank, self.abort, self.exit_code = float(timeout), rank, abort, exit_code
        self.heartbeat, self.option = None, option
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="minidl-watchdog", daemon=True)

    def after_step(self, where):
        progress(where)

    def start(self):
        progress()
        self._thread.start()
        return self

    def listen(self, heartbeat):
        """Include ``heartbeat``'s report on the other ranks in the message; it is started
        here and stopped with the watchdog."""
        self.heartbeat = heartbeat.start()

    def close(self):
        self.stop()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def _watch(self):
        while not self._stop.wait(min(1.0, self.timeout / 10)):
            quiet = idle()[0]
            if quiet > self.timeout:
                self._fire(quiet)
                return

    def _fire(self, quiet):
        others = self.heartbeat.describe(self.timeout) if self.heartbeat is not None else ""
        me = f"rank {self.rank} on {socket.gethostname()}"
        reason = (
            f"{me} made no progress for {quiet:.0f} s (last: {_last['where']}): a rank is "
            f"stopped, deadlocked or far slower than the others; aborting the job.{others}"
        )
        sys.stderr.write(
            f"minidl: {reason} Once it is fixed, continue from the last checkpoint with "
            f"{self.option('resume')} RUN/checkpoint.npz; if a step can really take this long, "
            f"raise {self.option('hang_timeout')}\n"
        )
        try:
            job_aborted(reason)
            if self.heartbeat is not None:  # a stopped process ignores what the abort sends
                self.heartbeat.kill_silent_here(self.timeout)
            self.abort(self.exit_code)
        finally:
            os._exit(self.exit_code)


INTERVAL_S = 1.0
_HEADER = struct.Struct("!id")  # rank, seconds since its last progress
_WHERE_BYTES = 64


def _own_address(host):
    try:
        return socket.gethostbyname(host)
    except OSError:
        return None


class Heartbeat:
    """Send and hear heartbeats on a background thread; ``describe()`` reports the peers.

    ``comm``: a ``Communicator`` (the constructor is collective: every rank makes one).
    ``idle()``: (seconds since this rank's last progress, where), the watchdog's clock.
    """

    def __init__(self, comm, idle):
        self.rank, self.idle = comm.rank, idle
        self.host = socket.gethostname()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.settimeout(INTERVAL_S)
        me = (self.host, _own_address(self.host), self.sock.getsockname()[1], os.getpid())
        peers = comm.allgather_object(me)
        self.hosts = [host for host, *_ in peers]
        self.pids = [pid for *_, pid in peers]
        one_host = len(set(self.hosts)) == 1
        self.targets = [
            ("127.0.0.1" if one_host else address, port)
            for rank, (_, address, port, _) in enumerate(peers)
            if rank != self.rank and (one_host or address)
        ]
        now = time.monotonic()
        self.heard = {
            rank: (now, 0.0, "start-up") for rank in range(len(peers)) if rank != self.rank
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="minidl-heartbeat", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=2 * INTERVAL_S)
        self.sock.close()

    def _run(self):
        next_send = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_send:
                idle, where = self.idle()
                message = _HEADER.pack(self.rank, idle) + where.encode()[:_WHERE_BYTES]
                for target in self.targets:
                    try:
                        self.sock.sendto(message, target)
                    except OSError:  # an unreachable peer is what describe() reports
                        pass
                next_send = now + INTERVAL_S
            try:
                data = self.sock.recv(_HEADER.size + _WHERE_BYTES)
            except OSError:  # timeout, or closed by stop()
                continue
            if len(data) >= _HEADER.size:
                rank, idle = _HEADER.unpack(data[: _HEADER.size])
                if rank in self.heard:
                    self.heard[rank] = (time.monotonic(), idle, data[_HEADER.size :].decode())

    def name(self, rank):
        return f"rank {rank} on {self.hosts[rank]}"

    def silent(self, timeout):
        """The peers not heard from for ``timeout`` / 2 s (at least three heartbeats)."""
        now = time.monotonic()
        limit = max(timeout / 2, 3 * INTERVAL_S)
        return [rank for rank, (when, _, _) in sorted(self.heard.items()) if now - when > limit]

    def kill_silent_here(self, timeout):
        """SIGKILL the silent peers on this host: a stopped (SIGSTOP) process holds every other
        signal until it runs again, so the job's abort would leave it behind."""
        for rank in self.silent(timeout):
            if self.hosts[rank] == self.host:
                try:
                    os.kill(self.pids[rank], signal.SIGKILL)
                except OSError:  # gone already, or not ours
                    pass

    def describe(self, timeout):
        """The peers that went silent, and those alive without progress, for ``timeout`` s."""
        now = time.monotonic()
        silent, stalled = self.silent(timeout), []
        for rank, (when, idle, where) in sorted(self.heard.items()):
            if rank in silent:
                continue
            if idle + (now - when) > timeout / 2:
                stalled.append(f"{self.name(rank)} (no progress for {idle:.0f} s, last: {where})")
        text = ""
        if silent:
            names = ", ".join(
                f"{self.name(r)} (silent {now - self.heard[r][0]:.0f} s)" for r in silent
            )
            hosts = ", ".join(sorted({self.hosts[r] for r in silent}))
            text += f" Not answering: {names}: its process, host or link is gone; check {hosts}."
        if stalled:
            text += f" Alive but stalled: {', '.join(stalled)}."
        if not silent and not stalled:
            text += " Every other rank answers and makes progress: this rank is the slow one."
        return text
