"""Scenario 6: hostile input, against both services.

schemathesis generates requests from both OpenAPI documents (valid and
invalid ones), and a hand-written list covers what generators rarely reach:
huge bodies, deep JSON nesting, invalid UTF-8, wrong content types, SQL and
header injection attempts, other accounts' IDs, missing and forged tokens, and
requests that are not even well-formed HTTP. Nothing may answer 5xx, every
error is problem+json, and a rejected request changes no row in either
database (both are read in full before and after each request).

platform_svc is fuzzed as the pair runs (its pushes go through the proxy);
cluster_svc is fuzzed directly on a database of its own, so the objects the
fuzzer creates there are not mistaken for orphans of the pair. This pair runs
no purge: a purge is a legitimate change, and would be taken for one a
rejected request made.
"""
from __future__ import annotations

import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, assume, given, seed, settings
from schemathesis.generation.modes import GenerationMode
from sqlalchemy import create_engine

from cluster_svc.cli import MIGRATIONS as CLUSTER_MIGRATIONS
from tests.chaos.convergence import fingerprint, read_audit, scenario_figures
from tests.chaos.harness import rules_path, running_pair, seed_for
from tooling.fuzzing import unique_key
from tooling.pair import TOKEN, Mark, Pair, PublicApi
from tooling.testing import (
    LiveServer,
    console_script,
    every_check,
    fresh_database,
    fuzzing_config,
)

PROBLEM = "application/problem+json"
PLATFORM_TABLES = ("accounts", "clusters", "firewall_rules")
CLUSTER_TABLES = ("clusters", "firewall_rules")
MIB = 1024 * 1024


@dataclass
class World:
    """Two accounts on the pair, their objects, and a cluster_svc of its own for the fuzzer."""

    pair: Pair
    a: PublicApi
    b: PublicApi
    a_cluster: str
    a_rule: str
    b_cluster: str
    b_rule: str
    fuzzed_cluster_svc: LiveServer
    fuzzed_engine: Any
    mark: Mark  # the pair's counters before this scenario
    direct: Counter  # cluster_svc's answers to calls made straight to it, by status

    def count(self, service: str, status: int) -> None:
        if service == "platform_svc":
            self.pair.tally.record(status)
        else:
            self.direct[status] += 1

    def snapshot(self, excluding: str | None = None) -> tuple:
        """Every database this scenario touches, as fingerprints (see :func:`fingerprint`)."""
        return (
            fingerprint(self.pair.platform_engine, PLATFORM_TABLES),
            fingerprint(self.pair.cluster_engine, CLUSTER_TABLES),
            fingerprint(self.fuzzed_engine, CLUSTER_TABLES, excluding=excluding),
        )


@pytest.fixture(scope="module")
def pair(pg_server_url, tmp_path_factory, request):
    """Both services on the run's PostgreSQL, without purge (see above)."""
    yield from running_pair(
        request, tmp_path_factory, platform_server=pg_server_url, cluster_server=pg_server_url, purge=False
    )


@pytest.fixture(scope="module")
def world(pair, pg_server_url):
    mark = pair.mark()
    a, b = pair.account("hostile-a"), pair.account("hostile-b")
    body = {"name": "target", "region": "eu-west-1", "postgres_version": 16, "plan": "hobby-0", "storage_gb": 10}
    a_cluster = a.create("/v1/clusters", body)["id"]
    a_rule = a.create(rules_path(a_cluster), {"cidr": "10.0.0.0/8", "description": "a's"})["id"]
    b_cluster = b.create("/v1/clusters", body)["id"]
    b_rule = b.create(rules_path(b_cluster), {"cidr": "10.0.0.0/8", "description": "b's"})["id"]
    fuzzed_db = fresh_database(pg_server_url, "chaos_fuzzed", migrations=CLUSTER_MIGRATIONS)
    fuzzed = LiveServer(
        [console_script("cluster-svc"), "serve", "--workers", "1", "--threads", "4"],
        {"CLUSTER_DATABASE_URL": fuzzed_db, "INTERNAL_TOKEN": TOKEN},
        output=pair.workdir / "cluster_svc_fuzzed.log",
    ).start()
    engine = create_engine(fuzzed_db)  # kept connections, as the pair's: snapshots are thousands of reads
    try:
        yield World(pair, a, b, a_cluster, a_rule, b_cluster, b_rule, fuzzed, engine, mark, Counter())
    finally:
        fuzzed.stop()
        engine.dispose()


def assert_problem(status: int, content_type: str | None, body: Any, where: str) -> None:
    assert content_type == PROBLEM, f"{where}: {status} answered as {content_type}: {body!r}"
    assert isinstance(body, dict), f"{where}: {body!r}"
    assert body.get("status") == status, f"{where}: {body!r}"
    assert all(body.get(key) for key in ("type", "title", "detail", "code")), f"{where}: {body!r}"


# -- schemathesis over both OpenAPI documents -----------------------------------------


@pytest.fixture(scope="module")
def documents(world):
    config = fuzzing_config()
    return {
        "platform_svc": schemathesis.openapi.from_url(f"{world.pair.platform_svc.url}/openapi.json", config=config),
        "cluster_svc": schemathesis.openapi.from_url(f"{world.fuzzed_cluster_svc.url}/openapi.json", config=config),
    }


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("service", ["platform_svc", "cluster_svc"])
def test_generated_requests_get_no_5xx_and_rejected_ones_change_nothing(world, documents, scale, service, mode):
    if service == "platform_svc":
        base_url, headers = world.pair.platform_svc.url, {"Authorization": f"Bearer {world.a.api_key}"}
    else:
        base_url, headers = world.fuzzed_cluster_svc.url, {"Authorization": f"Bearer {TOKEN}"}
    # The health, readiness and metrics routes take no input to fuzz.
    operations = [
        result.ok()
        for result in documents[service].get_all_operations()
        if result.ok().path not in ("/healthz", "/readyz", "/metrics")
    ]
    # cluster_svc: + its two batch routes and GET /v1/firewall-rules
    assert len(operations) == {"platform_svc": 10, "cluster_svc": 13}[service]

    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @seed(seed_for(f"{service} {operation.method} {operation.path} {mode}"))
        @settings(
            max_examples=scale.fuzz_examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case):
            # A query parameter generated as an object goes out form-exploded, as key=value
            # pairs, which can spell a valid query ({"idempotency_key": "k"} is the valid
            # ?idempotency_key=k); one generated as null or an empty list is not sent at all,
            # and a list of one as that one value (CHAOS_SEED=232972970: an invalid `after` of
            # that kind went out as the valid query without it): what is sent is then no invalid
            # request, and is not judged as one.
            assume(mode is not GenerationMode.NEGATIVE or not any(
                value is None or isinstance(value, (dict, list)) for value in (case.query or {}).values()
            ))
            # cluster_svc's one legitimate write on a 404: a DELETE of an unknown ID records its
            # tombstone. So the row a DELETE names is left out of the comparison.
            # (The ID is the path's last segment: path_parameters' order is not the path's.)
            named = case.formatted_path.rstrip("/").rsplit("/", 1)[-1] if case.method == "DELETE" else None
            unique_key(case.headers)
            before = world.snapshot(excluding=named)
            response = case.call(base_url=base_url, headers=headers, timeout=30)
            status = response.status_code
            world.count(service, status)
            where = f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}"
            assert status < 500, f"{where}: {status} {response.text}"
            if status >= 400:
                content_type = (response.headers.get("content-type") or [None])[0]
                assert_problem(status, content_type, response.json(), where)
                assert world.snapshot(excluding=named) == before, f"{where}: a rejected request changed data"
            # Then every schemathesis check: the answer is one the document declares (status,
            # headers, body), valid data accepted, invalid data refused, auth not ignored, ...
            # (Some checks send requests of their own, after the comparison above.)
            case.validate_response(response, checks=every_check(operation.path), headers=headers)

        check()


# -- the hand-written list --------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    name: str
    service: str  # "platform_svc" or "cluster_svc" (the pair's, directly)
    method: str
    path: str  # {a_cluster}, {a_rule}, {b_cluster}, {b_rule} are filled in
    status: int
    auth: str = "a"  # a, b, account, internal, none, forged, two, or the header's value itself
    json: Any = None
    data: Any = None
    headers: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return f"{self.service}: {self.name}"


def content_type(value: str) -> tuple[tuple[str, str], ...]:
    return (("Content-Type", value),)


JSON = content_type("application/json")
VALID = {"name": "ok", "region": "eu-west-1", "postgres_version": 16, "plan": "hobby-0", "storage_gb": 10}
VALID_DOWN = {**VALID, "id": "0193a1b2-7c00-7000-8000-00000000f00d", "team_id": "0193a1b2-7c00-7000-8000-0000000000aa"}
DEEP = "[" * 100_000 + "]" * 100_000
NESTED_NAME = '{"name": ' + "[" * 200 + "]" * 200 + "}"  # readable JSON, a wrong type
MULTIPART = content_type("multipart/form-data; boundary=x")
LONG_INTEGER = '{"storage_gb": 1' + "0" * 4999 + "}"  # more digits than Python will read
HUGE = b'{"name": "' + b"a" * 2 * MIB + b'"}'
A_CLUSTER = "/v1/clusters/{a_cluster}"
A_RULES = A_CLUSTER + "/firewall-rules"
A_RULE = A_RULES + "/{a_rule}"
A_RULE_UNDER_B = "/v1/clusters/{b_cluster}/firewall-rules/{a_rule}"
B_RULE_UNDER_A = A_RULES + "/{b_rule}"


def everywhere(service: str, valid: dict) -> list[Attack]:
    """What both services must turn away."""

    def attack(name, method, path, status, **options):
        return Attack(name, service, method, path, status, **options)

    create = "/v1/clusters"
    return [
        attack("a body of 2 MiB", "POST", create, 413, data=HUGE, headers=JSON),
        attack("a chunked body of 2 MiB", "POST", create, 413, data="chunks", headers=JSON),
        attack("JSON nested 100000 deep", "POST", create, 400, data=DEEP, headers=JSON),
        attack("a field nested 200 deep", "POST", create, 422, data=NESTED_NAME, headers=JSON),
        attack("invalid UTF-8", "POST", create, 400, data=b'{"name": "\xff\xfe\xc3("}', headers=JSON),
        attack("a lone surrogate", "POST", create, 422, data=b'{"name": "\\ud800", "region": 1}', headers=JSON),
        attack("an integer of 5000 digits", "POST", create, 400, data=LONG_INTEGER, headers=JSON),
        attack("NaN for a number", "POST", create, 422, data='{"storage_gb": NaN}', headers=JSON),
        attack("a JSON array", "POST", create, 422, json=[valid]),
        attack("text/plain", "POST", create, 415, data=str(valid), headers=content_type("text/plain")),
        attack("a form", "POST", create, 415, data=valid),
        attack("multipart", "POST", create, 415, data=b"--x--", headers=MULTIPART),
        attack("XML", "POST", create, 415, data="<cluster/>", headers=content_type("application/xml")),
        attack("no content type", "POST", create, 415, data=b'{"name": "x"}'),
        attack("SQL in a name", "POST", create, 422, json={**valid, "name": "x'; DROP TABLE clusters; --"}),
        attack("SQL in a query", "GET", "/v1/clusters?after=' OR '1'='1", 422),
        attack("SQL in a limit", "GET", "/v1/clusters?limit=1;DROP TABLE clusters", 422),
        attack("SQL in a path", "GET", "/v1/clusters/' OR 1=1 --", 422),
        attack("CRLF in a path", "GET", "/v1/clusters/%0d%0aSet-Cookie:%20pwned=1", 422),
        attack("percent-encoded bad UTF-8", "GET", "/v1/clusters/%ff%fe", 422),
        attack("the nil UUID", "GET", "/v1/clusters/00000000-0000-0000-0000-000000000000", 422),
        attack("no token", "GET", "/v1/clusters", 401, auth="none"),
        attack("an empty bearer", "GET", "/v1/clusters", 401, auth="Bearer"),
        attack("basic auth", "GET", "/v1/clusters", 401, auth="Basic dXNlcjpwYXNz"),
        attack("a 4000-character token", "GET", "/v1/clusters", 401, auth="Bearer " + "k" * 4000),
        attack("two bearers", "GET", "/v1/clusters", 401, auth="two"),
        attack("a create with no token", "POST", create, 401, auth="none", json=valid),
        attack("a delete with no token", "DELETE", A_CLUSTER, 401, auth="none"),
        attack("a method not served", "PUT" if service == "platform_svc" else "PATCH", A_CLUSTER, 405, json=valid),
    ]


def platform(name, method, path, status, **options) -> Attack:
    return Attack(name, "platform_svc", method, path, status, **options)


def internal(name, method, path, status, **options) -> Attack:
    return Attack(name, "cluster_svc", method, path, status, **options)


ATTACKS = [
    *everywhere("platform_svc", VALID),
    *everywhere("cluster_svc", VALID_DOWN),
    # platform_svc: fields only the platform sets, headers, tokens, other accounts' objects
    *(
        platform(f"a forged {field}", "POST", "/v1/clusters", 422, json={**VALID, field: value})
        for field, value in [
            ("id", "0193a1b2-7c00-7000-8000-000000000001"),
            ("team_id", "0193a1b2-7c00-7000-8000-000000000002"),
            ("account_id", "0193a1b2-7c00-7000-8000-000000000003"),
            ("generation", 99),
            ("sync_state", "synced"),
        ]
    ),
    platform("PATCH of an immutable field", "PATCH", A_CLUSTER, 422, json={"region": "us-east-1"}),
    platform("PATCH of a generation", "PATCH", A_CLUSTER, 422, json={"generation": 1}),
    platform("an empty PATCH", "PATCH", A_CLUSTER, 422, json={}),
    platform("a 300-character Idempotency-Key", "POST", "/v1/clusters", 400, json=VALID,
             headers=(("Idempotency-Key", "k" * 300),)),
    platform("a non-ASCII Idempotency-Key", "POST", "/v1/clusters", 400, json=VALID,
             headers=(("Idempotency-Key", "café".encode().decode("latin-1")),)),
    platform("a forged API key secret", "GET", "/v1/clusters", 401, auth="forged"),
    platform("the internal token", "GET", "/v1/clusters", 401, auth="internal"),
    *(
        platform(f"B: {method} {what}", method, path, 404, auth="b", json=body)
        for method, what, path, body in [
            ("GET", "A's cluster", A_CLUSTER, None),
            ("PATCH", "A's cluster", A_CLUSTER, {"plan": "memory-8"}),
            ("DELETE", "A's cluster", A_CLUSTER, None),
            ("GET", "A's cluster's rules", A_RULES, None),
            ("POST", "a rule on A's cluster", A_RULES, {"cidr": "0.0.0.0/0"}),
            ("GET", "A's rule", A_RULE, None),
            ("PATCH", "A's rule", A_RULE, {"description": "mine"}),
            ("DELETE", "A's rule", A_RULE, None),
            ("GET", "A's rule under B's cluster", A_RULE_UNDER_B, None),
            ("PATCH", "A's rule under B's cluster", A_RULE_UNDER_B, {"description": "x"}),
            ("DELETE", "A's rule under B's cluster", A_RULE_UNDER_B, None),
        ]
    ),
    platform("A: DELETE B's rule under A's cluster", "DELETE", B_RULE_UNDER_A, 404),
    # cluster_svc: tokens, IDs reused for other objects, generations out of range
    internal("an account's API key", "GET", "/v1/clusters", 401, auth="account"),
    internal("the token and one more character", "GET", "/v1/clusters", 401, auth=f"Bearer {TOKEN}x"),
    internal("SQL in team_id", "GET", "/v1/clusters?team_id=' OR 1=1 --", 422),
    internal("SQL in a body's team_id", "POST", "/v1/clusters", 422, json={**VALID_DOWN, "team_id": "x' OR 1=1"}),
    internal("A's cluster ID for another team", "POST", "/v1/clusters", 409, json={**VALID_DOWN, "id": "{a_cluster}"}),
    internal("A's rule ID under B's cluster", "POST", "/v1/clusters/{b_cluster}/firewall-rules", 409,
             json={"id": "{a_rule}", "cidr": "10.0.0.0/8"}),
    internal("GET A's rule under B's cluster", "GET", A_RULE_UNDER_B, 404),
    # A write naming a rule where it is not is refused as the conflict it is (the ID is taken elsewhere).
    internal("PUT A's rule under B's cluster", "PUT", A_RULE_UNDER_B, 409, json={"generation": 9, "description": "x"}),
    internal("DELETE A's rule under B's cluster", "DELETE", A_RULE_UNDER_B, 409),
    *(
        internal(f"generation {value!r}", "PUT", A_CLUSTER, 422,
                 json={"generation": value, "name": "x", "plan": "hobby-0", "storage_gb": 10})
        for value in (0, -1, 2**31, "3", True, 2.5, None)
    ),
]


def fill(value: Any, world: World) -> Any:
    names = {"a_cluster": world.a_cluster, "a_rule": world.a_rule, "b_cluster": world.b_cluster, "b_rule": world.b_rule}
    if isinstance(value, str):
        return value.format_map(names) if "{" in value else value
    if isinstance(value, dict):
        return {key: fill(item, world) for key, item in value.items()}
    return value


def authorization(attack: Attack, world: World) -> dict[str, str]:
    tokens = {
        "a": f"Bearer {world.a.api_key}",
        "b": f"Bearer {world.b.api_key}",
        "internal": f"Bearer {TOKEN}",
        "account": f"Bearer {world.a.api_key}",
        "forged": f"Bearer {world.a.api_key.split('.')[0]}.forged-secret",
        "two": f"Bearer {world.a.api_key}, Bearer {world.b.api_key}",
    }
    if attack.auth == "none":
        return {}
    if attack.service == "cluster_svc" and attack.auth == "a":
        return {"Authorization": f"Bearer {TOKEN}"}
    return {"Authorization": tokens.get(attack.auth, attack.auth)}


def chunks():
    yield b'{"name": "'
    for _ in range(2 * MIB // 65536):
        yield b"a" * 65536
    yield b'"}'


@pytest.mark.parametrize("attack", ATTACKS, ids=str)
def test_a_hostile_request_is_refused_cleanly_and_changes_nothing(world, attack):
    base = world.pair.platform_svc.url if attack.service == "platform_svc" else world.pair.cluster_svc.url
    headers = {**authorization(attack, world), **dict(attack.headers)}
    data = chunks() if attack.data == "chunks" else attack.data
    before = world.snapshot()

    response = requests.request(
        attack.method, base + fill(attack.path, world), json=fill(attack.json, world), data=data,
        headers=headers, timeout=60,
    )

    world.count(attack.service, response.status_code)
    assert response.status_code == attack.status, response.text[:500]
    assert_problem(response.status_code, response.headers.get("Content-Type"), response.json(), str(attack))
    assert "Set-Cookie" not in response.headers and "pwned" not in str(response.headers)
    assert world.snapshot() == before


def test_sql_in_free_text_is_stored_verbatim_and_harms_nothing(world):
    text = "'); DELETE FROM firewall_rules; DROP TABLE clusters; --"
    before = world.snapshot()

    rule = world.a.create(rules_path(world.a_cluster), {"cidr": "192.168.0.0/16", "description": text})

    assert rule["description"] == text and rule["sync_state"] == "synced"
    assert world.pair.cluster_row("firewall_rules", rule["id"])["description"] == text
    after = world.snapshot()
    assert after[0]["firewall_rules"][0] == before[0]["firewall_rules"][0] + 1  # one more row, no fewer
    assert after[1]["firewall_rules"][0] == before[1]["firewall_rules"][0] + 1
    assert (after[0]["clusters"], after[1]["clusters"]) == (before[0]["clusters"], before[1]["clusters"])


def test_a_forged_host_header_does_not_reach_the_location(world):
    response = world.a.call("POST", "/v1/clusters", json=VALID, headers={"Host": "evil.example"})

    assert response.status_code == 201
    assert "evil" not in response.headers["Location"]


# -- requests that are not well-formed HTTP ----------------------------------------------

MALFORMED = {
    "a NUL byte in a header": b"GET /v1/clusters HTTP/1.1\r\nHost: x\r\nX-Evil: a\x00b\r\n{auth}\r\n",
    "a CR inside a header value": b"GET /v1/clusters HTTP/1.1\r\nHost: x\r\nX-Evil: a\rSet-Cookie: x=1\r\n{auth}\r\n",
    "a folded header line": b"GET /v1/clusters HTTP/1.1\r\nHost: x\r\nX-Evil: a\r\n b\r\n{auth}\r\n",
    "two Content-Lengths": b"POST /v1/clusters HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\nContent-Length: 40\r\n{auth}\r\n{}",
    "a header of 10 KB": b"GET /v1/clusters HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n{auth}\r\n",
    "300 headers": b"GET /v1/clusters HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(300))
    + b"{auth}\r\n",
    "bad bytes in the request line": b"GET /v1/clusters?limit=\xff HTTP/1.1\r\nHost: x\r\n{auth}\r\n",
    "a request line of 10 KB": b"GET /v1/clusters?after=" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n{auth}\r\n",
    "an unsupported Transfer-Encoding": b"POST /v1/clusters HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: br\r\n{auth}\r\n{}",
}


def send_raw(url: str, data: bytes) -> tuple[int, str | None]:
    """Send bytes as they are; return the answer's status and Content-Type."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    lines = received.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(":", 1) for line in lines[1:] if ":" in line)
    return int(lines[0].split(" ")[1]), headers.get("content-type", "").strip() or None


def send_malformed(world: World, service: str) -> dict[str, tuple[int, str | None]]:
    """Each malformed request, with the right token, to ``service``; the answers by name."""
    if service == "platform_svc":
        url, token = world.pair.platform_svc.url, world.a.api_key
    else:
        url, token = world.pair.cluster_svc.url, TOKEN
    end_of_headers = f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
    return {name: send_raw(url, request.replace(b"{auth}\r\n", end_of_headers)) for name, request in MALFORMED.items()}


@pytest.mark.parametrize("service", ["platform_svc", "cluster_svc"])
def test_malformed_http_is_refused_with_a_4xx_and_changes_nothing(world, service):
    before = world.snapshot()

    answers = send_malformed(world, service)

    assert {name: status for name, (status, _) in answers.items() if not 400 <= status < 500} == {}
    assert world.snapshot() == before


@pytest.mark.parametrize("service", ["platform_svc", "cluster_svc"])
def test_malformed_http_is_answered_as_problem_json(world, service):
    """Every error body is problem+json, including the ones gunicorn writes before the app sees the request."""
    answers = send_malformed(world, service)

    assert {name: answer for name, answer in answers.items() if answer[1] != PROBLEM} == {}


def test_afterwards_both_databases_agree(world, figures):
    pair = world.pair
    pair.converge()
    comparison = pair.compare()

    direct_5xx = sum(n for status, n in world.direct.items() if status >= 500)
    row = scenario_figures(
        pair,
        "6 hostile input",
        world.mark,
        comparison,
        expected=comparison.live_and_deleted(comparison.platform),  # whatever the fuzzer created
        notes=f"cluster_svc called directly: {sum(world.direct.values())} requests, {direct_5xx} answered 5xx",
    )
    figures.append(row)
    assert comparison.exact, comparison.describe()
    assert (row.public_5xx, row.downstream_5xx, direct_5xx) == (0, 0, 0)
    assert read_audit(pair).clean, read_audit(pair)
