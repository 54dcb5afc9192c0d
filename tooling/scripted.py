"""A real HTTP/1.1 server on 127.0.0.1 whose every answer a test scripts, for testing HTTP clients.

Nothing in the client is mocked: the server answers each request as the test
scripted it (a status and body, after a delay; the connection dropped; no answer
at all) and records every request it receives (method, path, headers, body,
arrival time, client port, TCP connection).
"""
from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from typing import Any


@dataclass(frozen=True)
class Action:
    """What the server does with one request."""

    kind: str  # "reply", "drop", "hang" or "trickle"
    status: int = 200
    body: Any = None  # dict/list -> JSON, bytes -> as is, None -> no body
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before replying (or, for "hang", at most)


def reply(status: int, body: Any = None, headers: dict[str, str] | None = None, delay: float = 0.0) -> Action:
    return Action("reply", status, body, dict(headers or {}), delay)


def drop() -> Action:
    """Read the request, then close the connection without a word."""
    return Action("drop")


def hang(seconds: float = 30.0) -> Action:
    """Read the request and never answer (until the server stops)."""
    return Action("hang", delay=seconds)


def trickle(status: int, body: bytes, every: float) -> Action:
    """Answer ``status`` at once, then ``body`` one byte every ``every`` seconds: no read ever
    waits long, yet the answer takes ``len(body) * every`` seconds to arrive."""
    return Action("trickle", status, body, {}, every)


@dataclass
class Received:
    method: str
    path: str
    headers: Message
    body: bytes
    at: float  # time.monotonic() when the request was fully read
    port: int  # the client's source port: one per TCP connection
    connection: int  # the server's number for the TCP connection (1, 2, ...)

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Script = Callable[[Received], Action]


class ScriptedServer:
    """A real HTTP/1.1 server on 127.0.0.1 whose answers the test scripts.

    ``script(a, b, c)`` answers the first request with ``a``, the second with
    ``b`` and every later one with ``c`` (the last action sticks). An action may
    also be a callable taking the ``Received`` request and returning an Action.
    """

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.connections = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._actions: list[Action | Script] = [reply(200, {})]
        self._sockets: list[socket.socket] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive
            timeout = 10  # an idle kept-alive connection does not live forever

            def setup(self) -> None:
                super().setup()
                with outer._lock:
                    outer.connections += 1
                    self.connection_number = outer.connections

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                received = Received(
                    method=self.command,
                    path=self.path,
                    headers=self.headers,
                    body=body,
                    at=time.monotonic(),
                    port=self.client_address[1],
                    connection=self.connection_number,
                )
                with outer._lock:
                    outer.requests.append(received)
                    action = outer._actions[0] if len(outer._actions) == 1 else outer._actions.pop(0)
                if callable(action):
                    action = action(received)
                if action.kind == "drop":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if action.kind == "hang":
                    outer.stopping.wait(action.delay)
                    self.close_connection = True
                    return
                if action.delay and action.kind != "trickle" and outer.stopping.wait(action.delay):
                    self.close_connection = True
                    return
                if isinstance(action.body, bytes):
                    payload = action.body
                elif action.body is None:
                    payload = b""
                else:
                    payload = json.dumps(action.body).encode()
                try:
                    self.send_response(action.status)
                    if payload and "Content-Type" not in action.headers:
                        self.send_header("Content-Type", "application/json")
                    for name, value in action.headers.items():
                        self.send_header(name, value)
                    if action.status not in (204, 304):
                        self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if action.kind == "trickle":
                        for byte in payload:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            if outer.stopping.wait(action.delay):
                                break
                    elif action.status not in (204, 304):
                        self.wfile.write(payload)
                    self.wfile.flush()
                except OSError:  # the client gave up on us (e.g. after its read timeout)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = False  # server_close() joins every handler thread
            block_on_close = True

            def process_request(self, request: Any, client_address: Any) -> None:
                with outer._lock:
                    outer._sockets.append(request)
                super().process_request(request, client_address)

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # resets and broken pipes are part of the script

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01})

    def script(self, *actions: Action | Script) -> None:
        assert actions
        with self._lock:
            self._actions = list(actions)

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._thread.join()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:  # wake handlers blocked reading an idle keep-alive connection
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()

    def gaps(self) -> list[float]:
        """Seconds between consecutive requests, as the server saw them."""
        times = [r.at for r in self.requests]
        return [b - a for a, b in zip(times, times[1:])]


__all__ = ["Action", "Received", "Script", "ScriptedServer", "drop", "hang", "reply"]
