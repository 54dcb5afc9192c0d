"""P14: what each kind of public request costs the database (docs/performance.md).

Sends ``count`` requests of one kind to platform_svc over ``parallel`` keep-alive
connections and reads, before and after, the platform database's transactions
(``pg_stat_database``: commits and rollbacks, of every process using that
database) and PostgreSQL's CPU (all its processes: cluster_svc's database work
for an inline push included, as P11 counts it). A backend reports its
transactions to ``pg_stat_database`` up to 10 s after going idle, so each
reading waits that long (:data:`SETTLE`).

Kinds: a public create (pushed down inline), a public read (the first page of
the account's clusters), a request refused by the account's limit (429: an
account limited to 1 a second, flooded with reads; the reads let in are
taken out at one transaction each), and a request with a made-up key (401),
from one address over keep-alive connections and from a thousand loopback
addresses, a connection each.
"""
from __future__ import annotations

import http.client
import json
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.processes import sql, tree_cpu

BODY = json.dumps({"name": "cost", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2",
                   "storage_gb": 100})
TARGETS = {"public create": 2, "public read": 1, "refused (limit)": 0, "unknown key": 0.1,
           "unknown key, 1,000 addresses": 0.1}
ADDRESSES = 1000  # the made-up keys' sources: 127.0.1.1 onwards, one connection each
CPU_TARGET_MS = 0.45  # PostgreSQL CPU per public create
# A backend reports its transactions to pg_stat_database at most once a second while busy and, once
# idle, within PGSTAT_IDLE_INTERVAL (10 s): a reading waits that long after the load.
SETTLE = 11.0


@dataclass
class Cost:
    kind: str
    requests: int
    statuses: Counter
    transactions: float  # per request
    pg_cpu_ms: float  # per request

    def line(self) -> str:
        target = TARGETS[self.kind]
        verdict = "pass" if self.transactions <= target + 0.05 else "FAIL"
        statuses = ", ".join(f"{status} x{n}" for status, n in sorted(self.statuses.items()))
        return (f"  {self.kind:<28} {self.transactions:5.2f} transactions (target <= {target}: {verdict}),"
                f" PostgreSQL CPU {self.pg_cpu_ms:.3f} ms per request; {self.requests} sent: {statuses}")


def transactions(server_url: str, database: str) -> int:
    """The database's transactions so far, once every backend has reported its own (:data:`SETTLE`)."""
    time.sleep(SETTLE)
    return sql(server_url, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
               (database,))[0][0]


def send(url: str, count: int, parallel: int, request) -> Counter:
    """``count`` requests, ``request(connection)`` each, over ``parallel`` keep-alive connections."""
    address = urlsplit(url)

    def one_connection(n: int) -> Counter:
        answers: Counter = Counter()
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
        try:
            for _ in range(n):
                answer = request(connection)
                answer.read()
                answers[answer.status] += 1
        finally:
            connection.close()
        return answers

    shares = [count // parallel + (1 if i < count % parallel else 0) for i in range(parallel)]
    with ThreadPoolExecutor(parallel) as pool:
        return sum(pool.map(one_connection, shares), Counter())


def send_from_many(url: str, count: int, parallel: int, request) -> Counter:
    """``count`` requests, each on a connection of its own from its own loopback address (of
    :data:`ADDRESSES`), ``parallel`` at a time: a source that is a crowd."""
    address = urlsplit(url)

    def one(n: int) -> int:
        source = f"127.0.{1 + (n % ADDRESSES) // 250}.{1 + (n % ADDRESSES) % 250}"
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30, source_address=(source, 0))
        try:
            answer = request(connection)
            answer.read()
            return answer.status
        finally:
            connection.close()

    with ThreadPoolExecutor(parallel) as pool:
        return Counter(pool.map(one, range(count)))


def measure(platform_url: str, server_url: str, database: str, postmaster: int | None, *,
            api_key: str, limited_key: str, count: int = 300) -> list[Cost]:
    """The four kinds, in turn. ``api_key``'s account must not reach its limit; ``limited_key``'s
    account must have a limit of 1 request a second."""

    def call(method: str, key: str, body: str | None = None):
        def request(connection: http.client.HTTPConnection) -> http.client.HTTPResponse:
            headers = {"Authorization": f"Bearer {key() if callable(key) else key}"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, "/v1/clusters", body=body, headers=headers)
            return connection.getresponse()
        return request

    kinds = [
        ("public create", call("POST", api_key, BODY), 8),
        ("public read", call("GET", api_key), 8),
        ("refused (limit)", call("GET", limited_key), 50),  # each answered when its window ends
        ("unknown key", call("POST", made_up, BODY), 8),
        ("unknown key, 1,000 addresses", call("POST", made_up, BODY), 8),
    ]
    costs = []
    for kind, request, parallel in kinds:
        roots = {"postgres": postmaster} if postmaster else {}
        before, cpu_before = transactions(server_url, database), tree_cpu(roots)
        if kind.endswith("addresses"):
            statuses = send_from_many(platform_url, max(count, ADDRESSES), parallel, request)
        else:
            statuses = send(platform_url, count, parallel, request)
        cpu_after, after = tree_cpu(roots), transactions(server_url, database)
        pg_cpu = 1000 * (cpu_after["postgres"] - cpu_before["postgres"]) / count if postmaster else float("nan")
        spent = after - before
        if kind == "refused (limit)":  # the one read a second let in costs its own transaction: not the refusals'
            spent -= statuses[200] * TARGETS["public read"]
            count_refused = max(1, count - statuses[200])
            costs.append(Cost(kind, count, statuses, spent / count_refused, pg_cpu))
            continue
        sent = sum(statuses.values())
        costs.append(Cost(kind, sent, statuses, spent / sent, pg_cpu * count / sent))
    return costs


def made_up() -> str:
    """A key id nobody was given (and without the platform's mark), and a secret."""
    return f"{uuid.uuid4().hex[:16]}.{uuid.uuid4().hex}"


def report(costs: list[Cost]) -> str:
    lines = ["P14 what each public request costs the platform's database (sequential kinds, keep-alive;"
             " transactions from pg_stat_database, PostgreSQL CPU of all its processes):"]
    lines.extend(cost.line() for cost in costs)
    return "\n".join(lines)
