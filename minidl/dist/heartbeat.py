"""Heartbeats between ranks, so that a stalled job can say which rank and host stopped answering.

MPI cannot tell a rank that waits for a peer whether the peer is slow, stopped
or gone. Every ``INTERVAL_S`` each rank sends every other rank one UDP
datagram: its rank, how long ago it last made progress (``watchdog.progress``)
and where. When the watchdog gives up, ``describe()`` sorts the peers into
those *not heard from* (their process, host or link is gone: the datagrams
stopped) and those *heard from but stalled* (alive, stopped or deadlocked).

Addresses: ranks that all run on one host use 127.0.0.1; otherwise each rank
sends to the address its peer's hostname resolves to. A rank whose hostname
does not resolve gets no heartbeats and is reported as unknown.
"""

import socket
import struct
import threading
import time

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
        me = (self.host, _own_address(self.host), self.sock.getsockname()[1])
        peers = comm.allgather_object(me)
        self.hosts = [host for host, _, _ in peers]
        one_host = len(set(self.hosts)) == 1
        self.targets = [
            ("127.0.0.1" if one_host else address, port)
            for rank, (_, address, port) in enumerate(peers)
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

    def describe(self, timeout):
        """The peers that went silent, and those alive without progress, for ``timeout`` s."""
        now = time.monotonic()
        silent, stalled = [], []
        for rank, (when, idle, where) in sorted(self.heard.items()):
            if now - when > max(timeout / 2, 3 * INTERVAL_S):
                silent.append(rank)
            elif idle + (now - when) > timeout / 2:
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
