"""The services' gunicorn worker: gevent, slow clients bounded, malformed HTTP as problem+json.

Why gevent (docs/decisions/0004-worker-model.md): a threaded worker gives
each connection a thread while it reads the request, so a few dozen
connections that stay silent or send their headers a line at a time hold
every thread and nobody else is answered. Under gevent a connection costs a
greenlet; psycopg2 (through :mod:`shared.deadline`'s wait callback) and every socket, lock and queue
(through gevent's monkey-patching) wait cooperatively, so one worker serves
hundreds of connections while any number of them dawdle.

Slow clients are dropped, not just tolerated. gunicorn bounds the wait for a
request line and headers (idle keep-alive time included) by ``keepalive``
seconds; this worker bounds the body the same way, counted from the end of
the headers. Past the deadline a read returns end-of-file, so the request
ends as a client disconnection (Werkzeug answers 400) and the connection is
closed.

Silent connections cannot fill a worker. gevent accepts at most ``connections``
at once per worker, and a silent one holds its place for the read timeout:
a client that opens thousands would leave every newcomer in the listen queue.
So past :data:`ROOM` of them, each new connection ends the wait of the oldest
connection that is waiting for a request (a first one, or the next on
keep-alive): those that sent no complete request are closed first, oldest
first, and a newcomer is always accepted. Requests in flight are never
interrupted.

A graceful stop (SIGTERM) finishes the requests in flight and closes idle
keep-alive connections at once, as a proxy does. gunicorn's gevent worker
would keep waiting for each idle connection's next request until its
keep-alive time ran out, so a stop took the whole graceful timeout whenever a
client (platform_svc's connection pool, say) kept a connection open. Its run
loop also looked at the stop once a second, and at the connections left once a
second after that: this worker's notices the stop at once and exits within
50 ms of its last connection closing, so a restart costs what its requests
need (about 1.5 s less a stop, measured).

``AccessLoggedByApp`` is gunicorn's logger minus its access line: the app
writes one per request itself.

Requests gunicorn cannot parse (a NUL in a header, a 10 KB request line, two
Content-Lengths, ...) never reach Flask: gunicorn answers them itself with an
HTML page. gunicorn has no hook for that page, so this worker replaces the
function that writes it, once per worker process, keeping every error the
services send in the one envelope.

A request whose framing is malformed is answered 400 and logged by the kind of
its error alone: gunicorn's messages quote the bytes it read, which for a
chunked body are the body itself (a password in a login form), so they never
reach a log (:func:`loggable`). A ``Transfer-Encoding`` other than ``chunked``
alone (``gzip, chunked``, say) is refused with 400 before the app sees it:
the services implement no other coding, and reading such a body as plain
chunks would store what the client did not mean. RFC 9112 suggests 501; the
services answer no client input with a 5xx, which a dashboard reads as their
own failure.

gunicorn joins a header field sent on several lines into one comma-separated
value and forgets the lines; this worker also wraps the function that builds
each request's environ, once per worker process, to record which fields came
on more than one line (:mod:`shared.repeated_headers`).
"""

from __future__ import annotations

import functools
import json
import socket
import time
from http import HTTPStatus
from typing import Any, Self

import gevent
from gevent.event import Event
from gevent.pool import Pool
from gevent.server import StreamServer
from gunicorn import glogging, util
from gunicorn.http import errors as http_errors
from gunicorn.http import wsgi as gunicorn_wsgi
from gunicorn.sock import ssl_context
from gunicorn.workers.ggevent import GeventWorker

from shared import deadline
from shared.errors import HTTP_CODES, PROBLEM_JSON, TYPE_PREFIX
from shared.repeated_headers import ENVIRON_KEY as REPEATED_HEADERS
from shared.repeated_headers import names_repeated


def transfer_codings(headers: list[tuple[str, str]]) -> list[str]:
    """The request's transfer codings, in order, lower-case (every Transfer-Encoding line)."""
    return [
        coding.strip().lower()
        for name, value in headers if name.upper() == "TRANSFER-ENCODING"
        for coding in value.split(",") if coding.strip()
    ]


# gunicorn's parse errors whose message quotes the request line: kept as a bounded, escaped excerpt.
REQUEST_LINE_ERRORS = (http_errors.InvalidRequestLine, http_errors.InvalidRequestMethod, http_errors.InvalidHTTPVersion)
EXCERPT = 80


def loggable(error: BaseException) -> BaseException:
    """``error``, or for one of gunicorn's parse errors the same kind of error whose message names
    its kind (and, for a bad request line, a bounded excerpt of it, escaped): gunicorn logs the
    message and answers it as the problem's detail, and its own quotes what the client sent (a
    chunked body's bytes, a header's value)."""
    if not isinstance(error, http_errors.ParseException):
        return error
    kind = type(error)
    text = kind.__name__
    if isinstance(error, REQUEST_LINE_ERRORS):
        text += f": {ascii(str(error))[:EXCERPT]}"
    named = type(kind.__name__, (kind,), {"__str__": lambda self: text, "__module__": __name__})
    return named.__new__(named)


def write_problem(sock, status_int: int, reason: str, mesg: str) -> None:
    if status_int == 501:
        # gunicorn's answer to a Transfer-Encoding it does not support: the
        # client's request is at fault, and no client input may cause a 5xx.
        status_int = 400
    reason = HTTPStatus(status_int).phrase
    code = HTTP_CODES.get(status_int, "bad_request")
    detail = mesg if status_int < 500 else "The server failed to handle this request; it has been logged."
    body = json.dumps(
        {"type": TYPE_PREFIX + code, "title": reason, "status": status_int, "detail": detail, "code": code}
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: {PROBLEM_JSON}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    util.write_nonblock(sock, head + body)
    _discard_input(sock)


def _discard_input(sock, *, limit: int = 64 * 1024, seconds: float = 1.0) -> None:
    """Read (briefly) what the client sent beyond what gunicorn parsed.

    The connection is closed next; closing it with unread input makes the
    kernel reset it, and a client that is still sending (a 10 KB request line)
    then loses the answer above. So: end our side, and drain theirs.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(seconds)
        deadline, drained = time.monotonic() + seconds, 0
        while drained < limit and time.monotonic() < deadline:
            chunk = sock.recv(8192)
            if not chunk:
                break
            drained += len(chunk)
    except OSError:
        pass


class DeadlineSocket:
    """A client socket whose reads end (as end-of-file) once a deadline has passed.

    Everything but ``recv`` is the wrapped gevent socket's own.
    """

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._deadline: float | None = None
        self._expired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def set_deadline(self, seconds: float | None) -> None:
        self._deadline = None if seconds is None else time.monotonic() + seconds

    def recv(self, size: int, *flags: int) -> bytes:
        if self._expired:
            return b""
        if self._deadline is None:
            return self._sock.recv(size, *flags)
        # Bytes already received are returned at once even past the deadline
        # (gevent reads before it waits): only waiting is bounded.
        with gevent.Timeout(max(self._deadline - time.monotonic(), 0.001), False):
            return self._sock.recv(size, *flags)
        self._expired = True
        return b""


class RequestWait:
    """The wait for a connection's request (its first, or after one the next on keep-alive):
    ends silently after ``seconds`` (gunicorn then closes the connection), or earlier when
    :meth:`end_now` is called. ``waits`` holds every wait in progress, oldest first."""

    def __init__(self, waits: dict[Any, RequestWait], seconds: float, *, served: bool) -> None:
        self._waits = waits
        self._timeout = gevent.Timeout(seconds, False)
        self.served = served  # the connection has had a request: an idle keep-alive wait
        self.ending = False

    def __enter__(self) -> Self:
        self._timeout.start()
        self._waits[gevent.getcurrent()] = self
        return self

    def __exit__(self, typ, value, tb) -> bool | None:
        self._waits.pop(gevent.getcurrent(), None)
        return self._timeout.__exit__(typ, value, tb)  # swallows its own expiry only

    def end_now(self, greenlet: Any) -> None:
        """End the wait in ``greenlet`` as if it had timed out (unless it has ended meanwhile)."""
        self.ending = True

        def throw() -> None:
            # Checked when the hub runs this: by then the greenlet may have got its
            # request and be handling it, which nothing may interrupt.
            if self._waits.get(greenlet) is self:
                greenlet.throw(self._timeout)

        gevent.get_hub().loop.run_callback(throw)


def _recording_repeated_headers(create: Any) -> Any:
    """gunicorn's ``wsgi.create``, plus the names of the fields that came on more than one line."""

    def create_recording(req, *args: Any, **kwargs: Any) -> Any:
        resp, environ = create(req, *args, **kwargs)
        repeated = names_repeated(req.headers)
        if repeated:
            environ[REPEATED_HEADERS] = repeated
        return resp, environ

    create_recording.records_repeated_headers = True
    return create_recording


# The share of a worker's connections that may be open before each new one closes the oldest
# waiting for a request: the rest is kept free so that a newcomer is accepted at once.
ROOM = 0.9
# How often a stopping worker looks whether its last connection has closed.
STOP_POLL = 0.05


class ProblemGeventWorker(GeventWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._served: set[Any] = set()  # connections (their greenlets) that have had a request
        self._waiting: dict[Any, RequestWait] = {}  # connections waiting for a request, oldest first
        self._open = 0
        self._room = max(1, int(self.worker_connections * ROOM))
        self._stopping = Event()  # set by a graceful stop: the run loop wakes at once

    def run(self) -> None:
        """gunicorn's gevent run loop (a pooled :class:`~gevent.server.StreamServer` per socket, the
        master told every second that this worker lives), woken at once by a stop, which then lasts
        as long as the connections still open (at most the graceful timeout)."""
        ssl_args = {"ssl_context": ssl_context(self.cfg)} if self.cfg.is_ssl else {}
        servers = []
        for sock in self.sockets:
            sock.setblocking(1)
            server = StreamServer(sock, handle=functools.partial(self.handle, sock), spawn=Pool(self.worker_connections),
                                  **ssl_args)
            if self.cfg.workers > 1:
                server.max_accept = 1
            server.start()
            servers.append(server)
        while self.alive:
            self.notify()
            self._stopping.wait(1.0)
        for server in servers:
            server.close()  # stop accepting
        ends = time.monotonic() + self.cfg.graceful_timeout
        while any(server.pool.free_count() != server.pool.size for server in servers):
            if time.monotonic() > ends:
                self.log.warning("Worker graceful timeout (pid:%s)", self.pid)
                for server in servers:
                    server.stop(timeout=1)
                return
            self.notify()
            gevent.sleep(STOP_POLL)

    def patch(self) -> None:
        super().patch()  # gevent.monkey.patch_all(), before the app is built
        deadline.install()  # psycopg2 waits for PostgreSQL through gevent, each wait bounded

    def init_process(self) -> None:
        util.write_error = write_problem
        if not getattr(gunicorn_wsgi.create, "records_repeated_headers", False):
            gunicorn_wsgi.create = _recording_repeated_headers(gunicorn_wsgi.create)
        super().init_process()

    def handle(self, listener, client, addr) -> None:
        self._open += 1
        self._make_room()
        try:
            super().handle(listener, DeadlineSocket(client), addr)
        finally:
            self._open -= 1
            self._served.discard(gevent.getcurrent())

    def _make_room(self) -> None:
        """Past the room, close the connections waiting longest for a request, one per newcomer."""
        excess = self._open - self._room
        if excess <= 0:
            return
        for greenlet, wait in self._waiting.items():  # end_now changes nothing here until the hub runs
            if excess <= 0:
                break
            if not wait.ending:
                wait.end_now(greenlet)
            excess -= 1

    def handle_request(self, listener_name, req, sock, addr) -> None:
        codings = transfer_codings(req.headers)
        if codings and codings != ["chunked"]:
            raise http_errors.UnsupportedTransferCoding("only chunked is implemented")
        # Headers are in; the body (read by the app) gets the same time again.
        sock.set_deadline(self.cfg.keepalive)
        try:
            super().handle_request(listener_name, req, sock, addr)
        finally:
            sock.set_deadline(None)
            self._served.add(gevent.getcurrent())

    def handle_error(self, req, client, addr, exc) -> None:
        super().handle_error(req, client, addr, loggable(exc))

    def timeout_ctx(self) -> Any:
        """The wait for a request line and headers (gunicorn's, bounded by ``keepalive``).

        After a connection's first request it is an idle keep-alive wait, which
        a graceful stop ends at once. A new connection's first request is
        still awaited at a stop: its client has just connected to send it.
        """
        return RequestWait(self._waiting, self.cfg.keepalive, served=gevent.getcurrent() in self._served)

    def handle_exit(self, sig, frame) -> None:
        stopping = not self.alive  # a second SIGTERM: the closing below runs already
        super().handle_exit(sig, frame)  # stop accepting and finish what is in flight...
        self._stopping.set()
        if not stopping:
            gevent.spawn(self._close_idle_connections)  # ...and close idle connections, now and later

    def _close_idle_connections(self) -> None:
        while True:  # until the worker exits: a request in flight now leaves its connection idle later
            for greenlet, wait in list(self._waiting.items()):
                if wait.served:
                    wait.end_now(greenlet)
            gevent.sleep(0.05)


class AccessLoggedByApp(glogging.Logger):
    """gunicorn's logger without its access line: the app writes one per request
    itself (shared.observability), with the route, the request ID and the
    duration, so a second line would only double the volume."""

    def access(self, resp, req, environ, request_time) -> None:
        return None
