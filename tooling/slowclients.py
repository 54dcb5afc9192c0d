"""Slow and idle clients, on real sockets: what property 10 is tested and measured with.

- :func:`open_silent` opens TCP connections that never send a byte.
- :class:`Trickler` sends a request's header lines one at a time, a pause
  between each, and never finishes them; it records when the server hung up.
- :class:`SilentHorde` holds many silent connections, reopening each one the
  server closes.

All only ever connect to the address they are given (tests use 127.0.0.1).
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from contextlib import ExitStack


def open_silent(host: str, port: int, count: int, stack: ExitStack) -> list[socket.socket]:
    """``count`` connected sockets that send nothing; closed when ``stack`` closes."""
    sockets = []
    for _ in range(count):
        sock = stack.enter_context(socket.create_connection((host, port), timeout=5))
        sockets.append(sock)
    return sockets


class Trickler(threading.Thread):
    """One connection sending a never-ending request header, a line every ``interval`` seconds.

    ``dropped_after`` is the number of seconds until the server closed the
    connection (or None while it is open). ``answer`` holds whatever the
    server wrote before closing (a 408 page, or nothing).
    """

    def __init__(self, host: str, port: int, *, interval: float, path: str = "/healthz") -> None:
        super().__init__(daemon=True)
        self.address = (host, port)
        self.interval = interval
        self.path = path
        self.started_at = 0.0
        self.dropped_after: float | None = None
        self.answer = b""
        self._stop_event = threading.Event()
        self._sock: socket.socket | None = None

    def run(self) -> None:
        self.started_at = time.monotonic()
        sock = self._sock = socket.create_connection(self.address, timeout=5)
        sock.settimeout(0.05)
        try:
            lines = [f"GET {self.path} HTTP/1.1\r\n".encode(), b"Host: 127.0.0.1\r\n"]
            n = 0
            while not self._stop_event.is_set():
                line = lines[n] if n < len(lines) else f"X-Trickle-{n}: {'x' * 8}\r\n".encode()
                n += 1
                sock.sendall(line)
                if self._closed_by_server(sock, self.interval):
                    break
        except OSError:  # reset or broken pipe: the server dropped us
            self._mark_dropped()
        finally:
            sock.close()

    def _closed_by_server(self, sock: socket.socket, seconds: float) -> bool:
        """Wait ``seconds`` (or until stopped) watching for the server closing the connection."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._stop_event.is_set():
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            if not data:
                self._mark_dropped()
                return True
            self.answer += data
        return False

    def _mark_dropped(self) -> None:
        if self.dropped_after is None:
            self.dropped_after = time.monotonic() - self.started_at

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


def start_tricklers(host: str, port: int, count: int, *, interval: float, stack: ExitStack) -> list[Trickler]:
    tricklers = [Trickler(host, port, interval=interval) for _ in range(count)]
    for trickler in tricklers:
        trickler.start()
        stack.callback(trickler.stop)
    return tricklers


class SilentHorde(threading.Thread):
    """``count`` connections that send nothing, kept open: each one the server closes is opened
    again at once, as a client that means to hold them would. ``reopened`` counts those."""

    def __init__(self, host: str, port: int, count: int) -> None:
        super().__init__(daemon=True)
        self.address, self.count = (host, port), count
        self.reopened = 0
        self._stopping = threading.Event()
        self._selector = selectors.DefaultSelector()

    def _open(self) -> None:
        try:
            sock = socket.create_connection(self.address, timeout=5)
        except OSError:
            return  # the listen queue is full: the next round tries again
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ)

    def run(self) -> None:
        for _ in range(self.count):
            self._open()
        while not self._stopping.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                self._selector.unregister(key.fileobj)
                key.fileobj.close()  # closed by the server (or answered: nothing was asked)
                self.reopened += 1
            for _ in range(self.count - len(self._selector.get_map())):
                self._open()

    def __enter__(self) -> SilentHorde:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()
