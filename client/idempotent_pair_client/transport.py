"""The one HTTP core every caller of the pair builds on: one call, its retries, and batches cut to fit.

platform_svc's pushes and the reconciler (:class:`shared.client.InternalClient`)
and the clients a program uses (``idempotent_pair_client.platform`` and ``idempotent_pair_client.cluster``)
all send through :class:`Transport`; they differ only in their
:class:`ClientPolicy` and in what they make of the answer. Light to import: the
standard library, urllib3 and :mod:`idempotent_pair_client.request_id`, nothing of the services'
web or database stack, so a caller's process loads none of it.

urllib3 directly, not ``requests`` on top of it: requests' per-call preparation
(settings merging, hooks, cookies, its Response) cost as much CPU as the rest of
platform_svc's public create, for nothing these calls use. One pooled,
keep-alive connection pool per transport; connect and read timeouts are always
set; redirects are never followed (following a 302 with a GET would report a
create that never happened as done). Every call carries ``X-Request-ID``: the
current request's (so platform_svc's inline push shows up under the caller's ID
in cluster_svc's log), or a fresh one per call, the same on each of its retries.

**Retries.** Every call of the pair is safe to repeat (by the caller's ID, or by
an Idempotency-Key sent again with it), so any method is retried, after:

- no answer: a connection refused, reset or closed before the answer, a
  connect or read timeout;
- a status of the policy's ``retry_statuses`` (429 and 5xx), a 413, 429 or 503
  carrying ``Retry-After`` (RFC 9110: a condition that passes), or a status and
  problem ``code`` of its ``retry_problems`` (a 409 "in flight").

Before a retry it waits what ``Retry-After`` asks (cut to ``retry_after_max``),
else a backoff: none before the first retry (a lost answer or a kept-alive
connection closed under the call is the commonest fault, and waiting would not
help it), then ``backoff_factor * 2 ** (n - 1)`` before the n-th, at most
``backoff_max``, with jitter: ``backoff_jitter`` seconds at most added, or with
``full_jitter`` a wait drawn between none and that bound. Retries end at the
first of: ``retries`` exhausted; ``total_timeout`` (a budget for the whole call:
each attempt's timeouts shrink to what is left, no attempt starts with less than
:data:`SHORTEST_ATTEMPT` left); ``retry_for`` (a window: no retry starts once it
has passed, and a pause never reaches past it; each attempt keeps its own
timeouts); a ``Retry-After`` asking for more than either leaves (the server's
word is taken: the last answer is the call's). The last answer is then the
call's; with none, :class:`NoAnswer` is raised.

Each retry is logged at DEBUG on the ``idempotent_pair_client`` logger (the call, the
attempt, what it got, the pause), and told to ``on_attempt`` when a caller gives one.
"""
from __future__ import annotations

import email.utils
import json
import logging
import platform
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import urllib3
from urllib3.connectionpool import connection_from_url
from urllib3.exceptions import ConnectTimeoutError, HTTPError, NewConnectionError, ProtocolError, ReadTimeoutError
from urllib3.exceptions import TimeoutError as CallTimedOut

from idempotent_pair_client import request_id

log = logging.getLogger("idempotent_pair_client")
VERSION = "0.1.0"  # the distribution's (client/pyproject.toml; a test holds them equal)
USER_AGENT = f"idempotent-pair-client/{VERSION} (python {platform.python_version()})"

# The statuses the push path retries within a call (cluster_svc overloaded or failing over).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Retried when they carry Retry-After, whatever the policy's statuses (as urllib3's Retry does).
RETRY_AFTER_STATUSES = frozenset({413, 429, 503})
# Less than this left of a call's total_timeout: no attempt is started.
SHORTEST_ATTEMPT = 0.05
_SECONDS = re.compile(r"\s*[0-9]+\s*")


class ClientError(Exception):
    """What the pair's clients raise: :class:`NoAnswer`, or a refusal (``ProblemError``)."""


class NoAnswer(ClientError):
    """No HTTP answer came back, however often the call was tried (refused, reset, timed out)."""

    def __init__(
        self, method: str, path: str, error: Exception, *, attempts: int, elapsed: float, reason: str | None = None
    ) -> None:
        self.method = method
        self.path = path
        self.error = error  # the last attempt's
        self.reason = reason or describe(error)  # "connection failed" or "timed out"
        self.attempts = attempts
        self.elapsed = elapsed
        super().__init__(f"{method} {path}: {self.reason} ({attempts} attempts in {elapsed:.1f} s)")


@dataclass(frozen=True)
class ClientPolicy:
    """How hard one call tries before giving its answer (see the module's docstring)."""

    connect_timeout: float = 2.0
    read_timeout: float = 10.0
    retries: int | None = 3  # None: as many as ``retry_for`` or ``total_timeout`` allow
    backoff_factor: float = 0.2
    backoff_max: float = 5.0
    backoff_jitter: float = 0.2
    retry_after_max: int = 30  # a longer Retry-After is cut to this; the row's own backoff does the rest
    pool_size: int = 10
    # Seconds one call may take in all (connects, reads, pauses and retries), or
    # None: only the per-attempt timeouts above bound it. Near the end of this
    # budget an attempt's timeouts shrink to what is left, no retry starts when
    # too little is left, and a Retry-After longer than what is left is not
    # waited for (the last answer is the call's answer).
    total_timeout: float | None = None
    # Seconds after the call began during which retries may start, or None. Unlike
    # total_timeout, an attempt keeps its own timeouts: a call takes at most this
    # plus one attempt (connect and read timeouts).
    retry_for: float | None = None
    full_jitter: bool = False  # wait a random time up to the backoff, instead of the backoff plus backoff_jitter
    retry_statuses: frozenset[int] = RETRY_STATUSES
    retry_problems: frozenset[tuple[int, str]] = frozenset()  # (status, problem code) also retried

    def __post_init__(self) -> None:
        if self.retries is None and self.retry_for is None and self.total_timeout is None:
            raise ValueError("retries=None needs retry_for or total_timeout: a call must end")

    def longest_call(self) -> float:
        """Seconds one call can take at most, all its retries included (a lease must outlast it)."""
        attempt = self.connect_timeout + self.read_timeout
        longest = float("inf")
        if self.retries is not None:
            jitter = 0.0 if self.full_jitter else self.backoff_jitter
            pause = max(self.backoff_max + jitter, self.retry_after_max)
            longest = (self.retries + 1) * attempt + self.retries * pause
        if self.retry_for is not None:
            longest = min(longest, self.retry_for + attempt)
        return longest if self.total_timeout is None else min(longest, self.total_timeout)

    def backoff(self, failures: int) -> float:
        """The pause after ``failures`` failed attempts in a row, when no Retry-After says otherwise."""
        if failures <= 1:
            return 0.0
        ceiling = self.backoff_factor * 2.0 ** (failures - 1)
        if self.full_jitter:
            return random.uniform(0, min(self.backoff_max, ceiling))
        if self.backoff_jitter:
            ceiling += random.random() * self.backoff_jitter
        return max(0.0, min(self.backoff_max, ceiling))

    def retries_answer(self, status: int, body: Any, *, has_retry_after: bool) -> bool:
        """Whether an answer with this status (and body) is worth another attempt."""
        if status in self.retry_statuses or (has_retry_after and status in RETRY_AFTER_STATUSES):
            return True
        code = body.get("code") if isinstance(body, dict) else None
        return isinstance(code, str) and (status, code) in self.retry_problems


@dataclass(frozen=True)
class Reply:
    """The answer a call ended with (after its retries)."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: Any  # the decoded JSON body; None when empty or not JSON
    attempts: int
    # This host's wall clock when the answering attempt was sent and answered: the
    # answer's Date was stamped between the two (shared.clock compares them).
    sent_at: float = 0.0
    received_at: float = 0.0
    request_id: str | None = None  # the X-Request-ID every attempt of the call carried


@dataclass(frozen=True)
class Attempt:
    """One attempt of a call, as ``on_attempt`` is told it: what it got (a status, or the error
    of an attempt that got no answer) and the pause before the next (None: it was the last)."""

    method: str
    path: str
    number: int  # 1 for the first
    status: int | None
    error: Exception | None
    pause: float | None
    request_id: str


class Transport:
    """Sends calls to one service with ``headers`` (its credentials) on every one; thread-safe, pooled."""

    def __init__(self, base_url: str, headers: Mapping[str, str], policy: ClientPolicy) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        # Not blocking: a call finding every pooled connection busy opens one
        # more (dropped afterwards) rather than waiting for one to come back.
        self._pool = connection_from_url(self.base_url, maxsize=policy.pool_size, block=False)
        self._prefix = urlsplit(self.base_url).path  # what the pool's requests put before a route's path
        self._headers = {"User-Agent": USER_AGENT, **headers, "Accept": "application/json"}

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        deadline: float | None = None,
        policy: ClientPolicy | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
    ) -> Reply:
        """One call with its retries: the answer it ended with.

        ``body``: sent as JSON unless None. ``headers``: added to this call's (the
        same on every retry). ``deadline`` (a time.monotonic() value) ends it sooner
        than the policy's ``total_timeout`` would (a caller's budget already partly spent).
        ``policy``: this call's, instead of the transport's. ``on_attempt``: told each attempt.

        :raise NoAnswer: no attempt got an HTTP answer.
        """
        sent, payload = prepared(self._headers, body, headers)
        plan = CallPlan(policy or self.policy, method, path, sent[request_id.HEADER], deadline, on_attempt)
        while True:
            connect, read, total = plan.begin()
            sent_at = time.time()
            try:
                response = self._pool.urlopen(
                    method, self._prefix + path, body=payload, headers=sent, retries=False, preload_content=False,
                    timeout=urllib3.Timeout(connect=connect, read=read, total=total), redirect=False,
                )
                data = _body_within(self._pool, response, None if total is None else time.monotonic() + total)
            except HTTPError as exc:
                pause = plan.failed(exc, retryable=isinstance(exc, (ConnectTimeoutError, ReadTimeoutError,
                                                                    ProtocolError)))
            else:
                outcome = plan.answered(response.status, response.headers, decode(data), sent_at)
                if isinstance(outcome, Reply):
                    return outcome
                pause = outcome
            if pause > 0:
                time.sleep(pause)

    def probe(self, path: str, timeout: float = 1.0) -> bool:
        """Whether the service serves a GET of ``path`` (2xx) right now: one attempt, no retries."""
        try:
            response = self._pool.urlopen(
                "GET", self._prefix + path, headers=self._headers, retries=False,
                timeout=urllib3.Timeout(connect=timeout, read=timeout), redirect=False,
            )
        except HTTPError:
            return False
        return 200 <= response.status < 300

    def close(self) -> None:
        self._pool.close()


def prepared(
    headers: Mapping[str, str], body: Any, extra: Mapping[str, str] | None
) -> tuple[dict[str, str], bytes | None]:
    """A call's headers (the transport's, JSON's when there is a body, the current request's ID or a new
    one, then ``extra``) and its encoded body: the same on every attempt, whichever transport sends it."""
    sent = dict(headers)
    if body is not None:
        sent["Content-Type"] = "application/json"
    sent[request_id.HEADER] = request_id.current_request_id() or request_id.new_request_id()
    sent.update(extra or {})
    return sent, None if body is None else encode(body)


class CallPlan:
    """One call's attempts without the I/O: each attempt's timeouts, and what its outcome leads to
    (return the answer, wait and try again, or raise :class:`NoAnswer`). The sync transport here and
    the asyncio one (:mod:`idempotent_pair_client.aio`) both run their calls by it, so they retry alike."""

    def __init__(
        self, policy: ClientPolicy, method: str, path: str, call_id: str, deadline: float | None = None,
        on_attempt: Callable[[Attempt], None] | None = None,
    ) -> None:
        self.policy, self.method, self.path, self.call_id, self.on_attempt = policy, method, path, call_id, on_attempt
        self.started = time.monotonic()
        if policy.total_timeout is not None:
            own = self.started + policy.total_timeout
            deadline = own if deadline is None else min(deadline, own)
        self.deadline = deadline
        self.window = None if policy.retry_for is None else self.started + policy.retry_for
        self.attempts = 0

    def begin(self) -> tuple[float, float, float | None]:
        """Start an attempt: its connect and read timeouts, and its total (None: unbounded), never past the deadline."""
        self.attempts += 1
        policy = self.policy
        if self.deadline is None:
            return policy.connect_timeout, policy.read_timeout, None
        left = max(self.deadline - time.monotonic(), 0.001)
        return min(policy.connect_timeout, left), min(policy.read_timeout, left), left

    def answered(self, status: int, headers: Mapping[str, str], body: Any, sent_at: float) -> Reply | float:
        """An attempt got an answer: the call's :class:`Reply`, or the seconds to wait before the next attempt."""
        reply = Reply(status, headers, body, self.attempts, sent_at, time.time(), self.call_id)
        if not self.policy.retries_answer(status, body, has_retry_after=bool(headers.get("Retry-After"))):
            self._tell(reply, None, None)
            return reply
        pause = self._pause(reply)
        self._tell(reply, None, pause)
        return reply if pause is None else pause

    def failed(self, error: Exception, *, retryable: bool, reason: str | None = None) -> float:
        """An attempt got no answer: the seconds to wait before the next.

        :raise NoAnswer: no further attempt (or ``error`` is not one a retry can get past).
        """
        pause = self._pause(None) if retryable else None
        self._tell(None, error, pause)
        if pause is None:
            raise NoAnswer(self.method, self.path, error, attempts=self.attempts,
                           elapsed=time.monotonic() - self.started, reason=reason) from error
        return pause

    def _tell(self, reply: Reply | None, error: Exception | None, pause: float | None) -> None:
        status = reply.status if reply is not None else None
        if pause is not None:
            log.debug("%s %s (request %s): attempt %d got %s; retrying in %.2f s", self.method, self.path,
                      self.call_id, self.attempts, status or describe(error or Exception()), pause)
        if self.on_attempt is not None:
            self.on_attempt(Attempt(self.method, self.path, self.attempts, status, error, pause, self.call_id))

    def _pause(self, reply: Reply | None) -> float | None:
        """Seconds to wait before the next attempt, or None: no further attempt."""
        policy, attempts, deadline, window = self.policy, self.attempts, self.deadline, self.window
        if policy.retries is not None and attempts > policy.retries:
            return None
        asked = None if reply is None else retry_after(reply.headers, policy.retry_after_max)
        pause = asked if asked else policy.backoff(attempts)
        now = time.monotonic()
        if deadline is not None:
            left = deadline - now
            if left < SHORTEST_ATTEMPT or (asked is not None and asked > left - SHORTEST_ATTEMPT):
                return None
            pause = min(pause, left - SHORTEST_ATTEMPT)
        if window is not None:
            left = window - now
            if left <= 0 or (asked is not None and asked > left):
                return None
            pause = min(pause, left)
        return max(pause, 0.0)


def retry_after(headers: Mapping[str, str], most: float) -> float | None:
    """The seconds a ``Retry-After`` header asks for (seconds or an HTTP date), at most ``most``;
    None when there is none, or it cannot be read (the backoff applies)."""
    value = headers.get("Retry-After")
    if value is None:
        return None
    if _SECONDS.fullmatch(value):
        seconds = float(int(value))
    else:
        when = email.utils.parsedate_tz(value)
        if when is None:
            return None
        seconds = email.utils.mktime_tz(when) - time.time()
    return min(max(seconds, 0.0), most)


def describe(error: Exception) -> str:
    """One line for a call that got no answer: "timed out" or "connection failed"."""
    if isinstance(error, CallTimedOut) and not isinstance(error, NewConnectionError):  # (a subclass, for history)
        return "timed out"
    return "connection failed"


def encode(body: Any) -> bytes:
    """A request body as the clients send it (compact JSON)."""
    return json.dumps(body, separators=(",", ":")).encode()


def _body_within(pool: urllib3.HTTPConnectionPool, response: urllib3.BaseHTTPResponse, ends: float | None) -> bytes:
    """The answer's body as it arrives, its connection given back to the pool after. urllib3's total
    timeout bounds each read, not the answer's arrival: one trickling in a byte at a time would hold
    the call past its budget, so past ``ends`` (a time.monotonic() value) the attempt has timed out.

    :raise ReadTimeoutError: the answer was still arriving at ``ends`` (its connection is closed).
    """
    chunks = []
    try:
        while chunk := response.read1(1 << 16):
            chunks.append(chunk)
            if ends is not None and time.monotonic() > ends:
                raise ReadTimeoutError(pool, response.geturl() or "", "the answer was still arriving when its"
                                       " attempt's total timeout ran out")
    except BaseException:
        response.close()
        raise
    finally:
        response.release_conn()
    return b"".join(chunks)


def decode(data: bytes) -> Any:
    """An answer's JSON body, or None (empty, or not JSON)."""
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def reason(call: str, status: int, payload: Any) -> str:
    """One line: the call, the status and, for a problem, its code and detail."""
    line = f"{call}: {status}"
    if isinstance(payload, dict) and payload.get("code"):
        line += f" {payload['code']}"
        if payload.get("detail"):
            line += f": {payload['detail']}"
    return line


Item = TypeVar("Item")
Result = TypeVar("Result")


def batches(items: Sequence[Item], *, max_items: int, max_bytes: int) -> Iterator[list[Item]]:
    """``items`` in order, cut into lists of at most ``max_items`` whose batch body
    (``{"items": [...]}``, encoded) is at most ``max_bytes`` (an item too large
    alone goes alone: its answer says so)."""
    envelope = len(encode({"items": []})) - 1  # each item below adds its comma; the first needs none
    chunk: list[Item] = []
    size = envelope
    for item in items:
        item_size = len(encode(item)) + 1
        if chunk and (len(chunk) == max_items or size + item_size > max_bytes):
            yield chunk
            chunk, size = [], envelope
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk


def send_in_batches(
    send: Callable[[list[Item]], Result],
    items: Sequence[Item],
    *,
    max_items: int,
    max_bytes: int,
    too_large: Callable[[Result], bool],
) -> Iterator[tuple[list[Item], Result]]:
    """Send ``items`` with as few calls as the limits allow, in order: (the items, ``send``'s result) per call.

    Items go as many to a call as fit (:func:`batches`); a call whose result is
    ``too_large`` (a 413) is split in two and each half sent again, so a 413 is
    never an item's answer unless the item alone is too large.
    """
    for chunk in batches(items, max_items=max_items, max_bytes=max_bytes):
        yield from _halves(send, chunk, too_large)


def is_item_result(result: Any) -> bool:
    """Whether one entry of a batch route's ``results`` is an item's answer (an object with an integer status)."""
    status = result.get("status") if isinstance(result, dict) else None
    return isinstance(status, int) and not isinstance(status, bool)


def _halves(
    send: Callable[[list[Item]], Result], chunk: list[Item], too_large: Callable[[Result], bool]
) -> Iterator[tuple[list[Item], Result]]:
    result = send(chunk)
    if too_large(result) and len(chunk) > 1:
        half = len(chunk) // 2
        yield from _halves(send, chunk[:half], too_large)
        yield from _halves(send, chunk[half:], too_large)
    else:
        yield chunk, result
