"""Clients that create clusters through the public API as a careful user does (tests/scale and
``make drill``): each create carries an Idempotency-Key, and a 503 or a connection error is
retried with the same key until the create is acknowledged.

Every attempt is recorded (when it was sent, when it was answered, and how), so a test
can tell what the clients saw around a fault it caused at a known moment.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import requests

RETRY_PAUSE = 0.2  # seconds between a 503 (or no answer) and the retry; Retry-After is longer than a test needs


@dataclass(frozen=True)
class Attempt:
    key: str
    sent: float  # time.monotonic()
    answered: float
    status: int | None  # None: no answer (connection refused, reset, timed out)
    error: str = ""  # why there was none


@dataclass
class Load:
    """``clients`` threads creating clusters through ``url`` as one account, until :meth:`stop`."""

    url: str
    api_key: str
    clients: int = 4
    attempts: list[Attempt] = field(default_factory=list)
    acknowledged: dict[str, str] = field(default_factory=dict)  # Idempotency-Key -> the acknowledged cluster ID
    refused: dict[str, int] = field(default_factory=dict)  # key -> a status that is not retried (4xx, 5xx but 503)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(self.clients)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 120) -> None:
        """Stop starting new creates; each client first finishes the one it is retrying."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        assert not any(thread.is_alive() for thread in self._threads), "a client still retries after 120 s"

    def _client(self, index: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.api_key}"
        number = 0
        while not self._stop.is_set():
            number += 1
            key = f"load-{index}-{number}-{uuid.uuid4().hex[:8]}"
            body = {"name": f"c{index}-{number}", "region": "eu-west-1", "postgres_version": 16,
                    "plan": "standard-2", "storage_gb": 100}
            while True:
                sent, error = time.monotonic(), ""
                try:
                    response = session.post(self.url + "/v1/clusters", json=body, timeout=30,
                                            headers={"Idempotency-Key": key})
                    status = response.status_code
                except requests.RequestException as exc:
                    response, status, error = None, None, f"{type(exc).__name__}: {exc}"
                    session.close()  # a fresh connection for the retry
                self._record(Attempt(key, sent, time.monotonic(), status, error))
                if status is not None and 200 <= status < 300:
                    with self._lock:
                        self.acknowledged[key] = response.json()["id"]
                    break
                if status is not None and status != 503:
                    with self._lock:
                        self.refused[key] = status
                    break
                time.sleep(RETRY_PAUSE)
        session.close()

    def _record(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)

    # -- what the clients saw ----------------------------------------------------------

    def wait_acknowledged(self, count: int, *, since: float = 0.0, timeout: float = 120) -> None:
        """Until ``count`` creates sent after ``since`` were acknowledged."""
        deadline = time.monotonic() + timeout
        while len(self.acknowledged_after(since)) < count:
            assert time.monotonic() < deadline, f"fewer than {count} creates acknowledged within {timeout} s"
            time.sleep(0.05)

    def acknowledged_after(self, since: float) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if a.sent >= since and a.status is not None and 200 <= a.status < 300]

    def statuses(self, since: float = 0.0) -> Counter:
        """Answers to attempts sent after ``since``, by status (None: no answer)."""
        with self._lock:
            return Counter(a.status for a in self.attempts if a.sent >= since)

    def unanswered(self, *, except_in_flight: tuple[float, float] | None = None) -> list[str]:
        """Why requests went unanswered (and when), leaving out those in flight during ``(start, end)``:
        sent before it ended and still unanswered when it began."""
        start, end = except_in_flight or (0.0, -1.0)
        with self._lock:
            return [f"{a.error} (sent at {a.sent:.3f}, after {a.answered - a.sent:.3f} s)" for a in self.attempts
                    if a.status is None and not (a.sent <= end and a.answered >= start)]

    def longest(self, *, since: float = 0.0) -> float:
        """The longest time an attempt sent after ``since`` waited for its answer (or for none)."""
        with self._lock:
            return max((a.answered - a.sent for a in self.attempts if a.sent >= since), default=0.0)

    def first_success_after(self, moment: float) -> float:
        """Seconds from ``moment`` to the first 2xx answer to a create sent after it."""
        return min(a.answered for a in self.acknowledged_after(moment)) - moment


def leader_gauge(port: int) -> float | None:
    """A reconciler's ``sync_repair_leader``, scraped from its metrics port (None: no answer)."""
    try:
        body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.RequestException:
        return None
    for line in body.splitlines():
        if line.startswith("sync_repair_leader "):
            return float(line.split()[1])
    raise AssertionError("sync_repair_leader is not exported")
