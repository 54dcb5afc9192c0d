"""A fault-injecting HTTP proxy for tests, placed between two services on loopback.

Each request it receives meets one fault:

- ``PASS``: forwarded (after ``latency`` seconds, if given), and the answer returned.
- ``REFUSE``: the connection is closed (FIN) before anything is forwarded.
- ``RESET``: the connection is aborted (RST) before anything is forwarded.
- ``DROP_RESPONSE``: forwarded; once the upstream has answered (so it has
  committed) the connection is aborted instead of answering.
- ``DELAY``: held for ``delay`` seconds (longer than the client waits), then
  forwarded; the answer goes to whoever is still listening, usually nobody.
- ``HOLD``: kept until the test releases or drops it (see :class:`Hold`).

What a request meets is decided in arrival order, under one lock: scripted
rules first (explicit, for races: "hold the next create of this ID"), then a
seeded :class:`Plan`, else ``PASS``. The n-th request the proxy sees always
gets the plan's n-th draw, so with the seed a run's faults can be replayed.
Everything seen is kept in :attr:`FaultProxy.log`, one :class:`Exchange` per
request, with when it arrived and when the client got its last byte (answer or
abort), so tests can check which pushes overlapped.

The proxy speaks just enough HTTP/1.1 for a test client: keep-alive, and
bodies with Content-Length or chunked. Upstream, each request goes on a fresh
connection; when the upstream cannot be reached or dies mid-request, the
client's connection is aborted, as it would be without a proxy.
"""
from __future__ import annotations

import enum
import functools
import http.client
import json
import random
import re
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlsplit

# Headers that describe one connection, not the message; never forwarded as-is.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "content-length"}
)
UUID_IN_PATH = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
MAX_LINE = 65536


class _Ending(enum.Enum):
    KEEP = "keep"  # ready for the next request on this connection
    CLOSE = "close"  # FIN
    ABORT = "abort"  # RST


class Fault(enum.Enum):
    PASS = "pass"
    REFUSE = "refuse"
    RESET = "reset"
    DROP_RESPONSE = "drop_response"
    DELAY = "delay"
    HOLD = "hold"


@dataclass(frozen=True)
class Request:
    """One request as the client sent it."""

    method: str
    target: str  # path and query
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def object_id(self) -> str | None:
        """What the request is about: a create's body ``id``, else the last UUID in the path
        (None for a batch: see :attr:`object_ids`)."""
        payload = self._payload()
        if isinstance(payload, dict) and isinstance(payload.get("id"), str):
            return payload["id"].lower()
        if self.is_batch:
            return None
        ids = UUID_IN_PATH.findall(self.path)
        return ids[-1].lower() if ids else None

    @property
    def is_batch(self) -> bool:
        return self.path.endswith("/batch")

    @functools.cached_property
    def object_ids(self) -> tuple[str, ...]:
        """Every object the request is about: a batch's item IDs in order, else its one object_id."""
        if not self.is_batch:
            return () if self.object_id is None else (self.object_id,)
        payload = self._payload()
        items = payload.get("items") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            return ()
        return tuple(item["id"].lower() for item in items if isinstance(item, dict) and isinstance(item.get("id"), str))

    def _payload(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name.lower()), None)

    @property
    def keep_alive(self) -> bool:
        return (self.header("Connection") or "").lower() != "close"


@dataclass
class Exchange:
    """What became of one request. Times are ``time.monotonic()``."""

    seq: int
    request: Request
    object_id: str | None  # the request's, worked out once
    fault: Fault
    received: float
    finished: float | None = None  # just before the client's last byte (answer or abort) was sent
    status: int | None = None  # the upstream's answer, when it gave one
    content_type: str | None = None
    body: bytes = b""  # the upstream's answer
    delivered: bool = False  # the answer was written while the client was still connected
    error: str | None = None  # why forwarding failed (upstream down, say)

    @property
    def method(self) -> str:
        return self.request.method

    @property
    def path(self) -> str:
        return self.request.path

    @property
    def forwarded(self) -> bool:
        return self.status is not None

    def answer(self) -> Any:
        """The upstream's answer decoded as JSON, or None."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def object_ids(self) -> tuple[str, ...]:
        return self.request.object_ids

    def statuses(self) -> dict[str, int]:
        """The upstream's answer per object: a batch's per-item statuses, else the one status.

        Empty when there was no answer (or a batch answered something other than its results).
        For a batch item repeated within the call, its first result.
        """
        if self.status is None:
            return {}
        if not self.request.is_batch:
            return {} if self.object_id is None else {self.object_id: self.status}
        answer = self.answer() if self.status == 200 else None
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list) or len(results) != len(self.object_ids):
            return {object_id: self.status for object_id in self.object_ids} if self.status != 200 else {}
        statuses: dict[str, int] = {}
        for object_id, result in zip(self.object_ids, results):
            statuses.setdefault(object_id, result.get("status") if isinstance(result, dict) else None)
        return statuses


class Plan:
    """Seeded random faults: each request draws once, in arrival order.

    ``rates`` maps faults to probabilities (their sum at most 1); the rest
    pass. ``Plan(7, {Fault.DROP_RESPONSE: 0.2, Fault.RESET: 0.1})``.

    The first requests get each fault of ``rates`` once, in its order, and
    only then does the seed draw: a scenario that asserts a fault happened
    holds whatever the seed, as long as that many requests came (a seed
    alone can draw no reset at all across the few calls of a batched push).
    """

    def __init__(self, seed: int, rates: dict[Fault, float]) -> None:
        if sum(rates.values()) > 1 or any(rate < 0 for rate in rates.values()):
            raise ValueError(f"rates must be probabilities summing to at most 1: {rates}")
        if Fault.HOLD in rates:
            raise ValueError("a hold needs someone to release it; script it with FaultProxy.hold")
        self.seed = seed
        self.rates = dict(rates)
        self._opening = [fault for fault, rate in rates.items() if rate > 0]
        self._random = random.Random(seed)

    def draw(self) -> Fault:
        if self._opening:
            return self._opening.pop(0)
        point = self._random.random()
        for fault, rate in self.rates.items():
            if point < rate:
                return fault
            point -= rate
        return Fault.PASS

    def __repr__(self) -> str:
        rates = ", ".join(f"{fault.value}={rate:g}" for fault, rate in self.rates.items())
        return f"Plan(seed={self.seed}, {rates})"


@dataclass
class Rule:
    """A scripted fault for the next ``times`` matching requests (``None``: all of them)."""

    fault: Fault
    method: str | None = None
    path: str | None = None  # a regular expression the whole path must match
    object_id: str | None = None
    times: int | None = 1

    def matches(self, request: Request) -> bool:
        return (
            (self.times is None or self.times > 0)
            and (self.method is None or request.method == self.method.upper())
            and (self.path is None or re.fullmatch(self.path, request.path) is not None)
            and (self.object_id is None or str(self.object_id).lower() in request.object_ids)
        )


class Hold:
    """A request kept by the proxy until the test releases or drops it.

    It keeps the first request matching its rule and, after that, every
    request that is the same again (method, target and body: the client's
    retries), so the client cannot get around it. :meth:`release` forwards
    them in arrival order; :meth:`drop` aborts them unforwarded.
    """

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.requests: list[Request] = []
        self.exchanges: list[Exchange] = []
        self._held = threading.Condition()
        self._decided = threading.Event()
        self._released = False
        self._done = threading.Condition()
        self._finished = 0
        self._turn = 0  # released requests go upstream one at a time, in order

    def wait_held(self, timeout: float, count: int = 1) -> Request:
        """Wait until ``count`` requests are kept (the first and its retries); return the first.

        :raise TimeoutError:
        """
        with self._held:
            if not self._held.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} of {count} requests held after {timeout} s: {self.rule}")
            return self.requests[0]

    def release(self) -> None:
        """Forward what is held, and anything that is the same again later."""
        self._released = True
        self._decided.set()

    def drop(self) -> None:
        """Abort what is held without forwarding it."""
        self._released = False
        self._decided.set()

    def wait_done(self, timeout: float) -> list[Exchange]:
        """Wait until every held request was forwarded (or dropped); return their exchanges.

        :raise TimeoutError:
        """
        with self._done:
            if not self._done.wait_for(lambda: self._finished == len(self.exchanges), timeout):
                raise TimeoutError(f"held requests not finished within {timeout} s")
            return list(self.exchanges)

    def _keeps(self, request: Request) -> bool:
        if not self.requests:
            return self.rule.matches(request)
        if self._decided.is_set():
            return False  # after the decision, a retry is just another request
        first = self.requests[0]
        return (request.method, request.target, request.body) == (first.method, first.target, first.body)

    def _add(self, request: Request, exchange: Exchange) -> int:
        with self._held:
            self.requests.append(request)
            self.exchanges.append(exchange)
            self._held.notify_all()
        return len(self.requests) - 1

    def _finish(self) -> None:
        with self._done:
            self._finished += 1
            self._turn += 1
            self._done.notify_all()


class FaultProxy:
    """The proxy; ``with FaultProxy(upstream_url) as proxy:`` and point the client at ``proxy.url``."""

    def __init__(
        self,
        upstream: str,
        *,
        plan: Plan | None = None,
        delay: float = 1.5,
        latency: float = 0.0,
        upstream_timeout: float = 60.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.plan = plan
        self.delay = delay
        self.latency = latency  # seconds every forwarded request waits first: a slow network
        self.upstream_timeout = upstream_timeout
        self._address = (host, port)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._rules: list[Rule] = []
        self._holds: list[Hold] = []
        self._log: list[Exchange] = []
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._clients: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self.url = ""

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> FaultProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(self._address)
        listener.listen(512)
        self._listener = listener
        host, port = listener.getsockname()
        self.url = f"http://{host}:{port}"
        self._spawn(self._accept_loop, "faultproxy-accept")
        return self

    def stop(self) -> None:
        """Drop whatever is held, close every connection and wait for the threads."""
        self._stopping.set()
        with self._lock:
            holds = list(self._holds)
            clients = list(self._clients)
        for hold in holds:
            if not hold._decided.is_set():
                hold.drop()
        if self._listener is not None:
            _quietly(self._listener.shutdown, socket.SHUT_RDWR)  # wakes accept()
            self._listener.close()
        for client in clients:
            _quietly(client.shutdown, socket.SHUT_RDWR)  # wakes a blocked read
        for thread in list(self._threads):
            thread.join(timeout=self.upstream_timeout + 5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the test scripts ---------------------------------------------

    def add_rule(
        self,
        fault: Fault,
        *,
        method: str | None = None,
        path: str | None = None,
        object_id: Any = None,
        times: int | None = 1,
    ) -> Rule:
        """Give the next ``times`` matching requests ``fault`` (before the plan draws)."""
        if fault is Fault.HOLD:
            raise ValueError("use hold() for a hold")
        rule = Rule(fault, method, path, None if object_id is None else str(object_id), times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def hold(self, *, method: str | None = None, path: str | None = None, object_id: Any = None) -> Hold:
        """Keep the next matching request (and its retries) until released or dropped."""
        hold = Hold(Rule(Fault.HOLD, method, path, None if object_id is None else str(object_id), 1))
        with self._lock:
            self._holds.append(hold)
        return hold

    def clear_rules(self) -> None:
        """Forward everything from now on (a fault that was lasting stops)."""
        with self._lock:
            self._rules.clear()

    # -- what the test reads ------------------------------------------------

    @property
    def log(self) -> list[Exchange]:
        with self._lock:
            return list(self._log)

    def faults(self, since: int = 0) -> Counter[str]:
        """How many requests met each fault other than PASS (from log position ``since``)."""
        return Counter(e.fault.value for e in self.log[since:] if e.fault is not Fault.PASS)

    def wait_idle(self, timeout: float) -> None:
        """Wait until no request is in flight (delayed or being forwarded); held ones count too.

        :raise TimeoutError:
        """
        with self._idle:
            if not self._idle.wait_for(lambda: self._in_flight == 0, timeout):
                raise TimeoutError(f"{self._in_flight} requests still in flight after {timeout} s")

    # -- the connection threads -----------------------------------------------

    def _spawn(self, target, name: str, *args: Any) -> None:
        thread = threading.Thread(target=self._run, args=(target, *args), name=name, daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _run(self, target, *args: Any) -> None:
        try:
            target(*args)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # the listener was shut down
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._clients.add(client)
            self._spawn(self._serve, "faultproxy-conn", client)

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        ending = _Ending.KEEP
        try:
            while ending is _Ending.KEEP and not self._stopping.is_set():
                try:
                    request = _read_request(reader)
                except (OSError, ValueError):
                    break  # the client went away or spoke something else than HTTP
                if request is None:
                    break
                ending = self._handle(client, request)
        finally:
            with self._lock:
                self._clients.discard(client)
            if ending is _Ending.ABORT:
                _abort(client, reader)
            else:
                reader.close()
                client.close()

    def _handle(self, client: socket.socket, request: Request) -> _Ending:
        """Apply this request's fault; say how its connection carries on."""
        exchange, hold, position = self._decide(request)
        try:
            fault = exchange.fault
            if fault is Fault.REFUSE:
                exchange.finished = time.monotonic()
                _quietly(client.shutdown, socket.SHUT_RDWR)  # a FIN, and no answer
                return _Ending.CLOSE
            if fault is Fault.RESET:
                exchange.finished = time.monotonic()
                return _Ending.ABORT
            if fault is Fault.DELAY and self._stopping.wait(self.delay):
                exchange.finished = time.monotonic()
                return _Ending.ABORT
            if hold is not None and not self._await_release(hold, position):
                exchange.finished = time.monotonic()
                return _Ending.ABORT
            if self.latency and self._stopping.wait(self.latency):
                exchange.finished = time.monotonic()
                return _Ending.ABORT
            try:
                status, reason, headers, body = self._forward(request)
            except (OSError, http.client.HTTPException) as exc:
                exchange.error = f"upstream: {type(exc).__name__}: {exc}"
                exchange.finished = time.monotonic()
                return _Ending.ABORT
            exchange.status, exchange.body = status, body
            exchange.content_type = next((v for k, v in headers if k.lower() == "content-type"), None)
            exchange.finished = time.monotonic()
            if fault is Fault.DROP_RESPONSE:
                return _Ending.ABORT
            if _hung_up(client):
                return _Ending.ABORT  # the client gave up (it timed out during a delay or hold)
            exchange.delivered = True  # before the bytes go: the client may read the log at once
            try:
                client.sendall(_response_bytes(request, status, reason, headers, body))
            except OSError:
                exchange.delivered = False
                return _Ending.ABORT
            return _Ending.KEEP if request.keep_alive else _Ending.CLOSE
        finally:
            if hold is not None:
                hold._finish()
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def _decide(self, request: Request) -> tuple[Exchange, Hold | None, int]:
        with self._lock:
            self._in_flight += 1
            hold = next((h for h in self._holds if h._keeps(request)), None)
            if hold is not None:
                fault = Fault.HOLD
            else:
                rule = next((r for r in self._rules if r.matches(request)), None)
                if rule is not None:
                    fault = rule.fault
                    if rule.times is not None:
                        rule.times -= 1
                else:
                    fault = self.plan.draw() if self.plan is not None else Fault.PASS
            exchange = Exchange(
                seq=len(self._log),
                request=request,
                object_id=request.object_id,
                fault=fault,
                received=time.monotonic(),
            )
            self._log.append(exchange)
            position = hold._add(request, exchange) if hold is not None else -1
        return exchange, hold, position

    def _await_release(self, hold: Hold, position: int) -> bool:
        """Block until the test decides; released requests then go upstream in arrival order."""
        hold._decided.wait()  # stop() drops every undecided hold
        if not hold._released or self._stopping.is_set():
            return False
        with hold._done:
            while hold._turn != position:
                if self._stopping.is_set():
                    return False
                hold._done.wait(0.5)
        return True

    def _forward(self, request: Request) -> tuple[int, str, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(*self.upstream, timeout=self.upstream_timeout)
        try:
            headers = {name: value for name, value in request.headers if name.lower() not in HOP_BY_HOP}
            headers["Connection"] = "close"
            upstream.request(request.method, request.target, body=request.body or None, headers=headers)
            response = upstream.getresponse()
            body = response.read()
            return response.status, response.reason, response.getheaders(), body
        finally:
            upstream.close()


# -- HTTP/1.1, as little as a test client needs ----------------------------------


def _read_request(reader: BinaryIO) -> Request | None:
    """The next request on the connection, or None when the client closed it.

    :raise ValueError: the bytes are not an HTTP/1.x request.
    """
    line = reader.readline(MAX_LINE)
    while line in (b"\r\n", b"\n"):
        line = reader.readline(MAX_LINE)
    if not line:
        return None
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x request line: {line[:100]!r}")
    method, target, version = parts
    headers = []
    while True:
        line = reader.readline(MAX_LINE)
        if not line:
            raise ValueError("connection closed inside the headers")
        if line in (b"\r\n", b"\n"):
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ValueError(f"not a header line: {line[:100]!r}")
        headers.append((name.strip(), value.strip()))
    request = Request(method.upper(), target, tuple(headers), b"")
    if version == "HTTP/1.0" and (request.header("Connection") or "").lower() != "keep-alive":
        headers.append(("Connection", "close"))
    if "chunked" in (request.header("Transfer-Encoding") or "").lower():
        body = _read_chunked(reader)
    else:
        body = _read_exactly(reader, int(request.header("Content-Length") or 0))
    return Request(method.upper(), target, tuple(headers), body)


def _read_chunked(reader: BinaryIO) -> bytes:
    chunks = []
    while True:
        size_line = reader.readline(MAX_LINE)
        size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            while reader.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        chunks.append(_read_exactly(reader, size))
        reader.readline(MAX_LINE)


def _read_exactly(reader: BinaryIO, size: int) -> bytes:
    if size < 0:
        raise ValueError("negative Content-Length")
    data = reader.read(size) if size else b""
    if len(data) != size:
        raise ValueError("connection closed inside the body")
    return data


def _response_bytes(
    request: Request, status: int, reason: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in HOP_BY_HOP]
    if request.method == "HEAD":
        lines += [f"{name}: {value}" for name, value in headers if name.lower() == "content-length"]
        body = b""
    elif status >= 200 and status not in (204, 304):
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: " + ("keep-alive" if request.keep_alive else "close"))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _hung_up(client: socket.socket) -> bool:
    """Whether the client closed its end (a write would still succeed, into the void)."""
    readable, _, _ = select.select([client], [], [], 0)
    if not readable:
        return False
    try:
        return client.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _abort(client: socket.socket, reader: BinaryIO) -> None:
    """Close with an RST rather than a FIN (or after the FIN a REFUSE already sent)."""
    _quietly(client.setsockopt, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reader.close()
    client.close()


def _quietly(call, *args: Any) -> None:
    try:
        call(*args)
    except OSError:
        pass


__all__ = ["Exchange", "Fault", "FaultProxy", "Hold", "Plan", "Request", "Rule"]
