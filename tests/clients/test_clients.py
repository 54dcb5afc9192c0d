"""PlatformClient and ClusterClient against a scripted server: what they send, what they retry,
what they raise, how long they try (their asyncio twins: tests/clients/test_async_clients.py; the
distribution itself: tests/clients/test_distribution.py).

The proof against the real services, through the fault proxy, is tests/e2e/test_clients_under_faults.py.
"""
from __future__ import annotations

import logging
import platform as platform_module
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import idempotent_pair_client
import pytest
from idempotent_pair_client.aio import AsyncClusterClient, AsyncPlatformClient
from idempotent_pair_client.cluster import ClusterClient
from idempotent_pair_client.core import Outcome, caller_policy
from idempotent_pair_client.errors import (
    Conflict,
    Gone,
    IdempotencyKeyReused,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
    ValidationFailed,
)
from idempotent_pair_client.platform import NoAnswer, PlatformClient, ProblemError

from tests.helpers import Synced
from tooling.scripted import drop, hang, reply, trickle

KEY = "api-key-for-tests"
TOKEN = "internal-token-for-tests"
OBJECT = {"id": "0193a1b2-7c00-7000-8000-000000000001", "name": "main-db"}


def problem(status: int, code: str, **extensions) -> dict:
    return {"type": "about:blank", "title": "t", "status": status, "detail": f"{code} detail", "code": code,
            **extensions}


ASYNC_TWIN = {PlatformClient: AsyncPlatformClient, ClusterClient: AsyncClusterClient}


@pytest.fixture
def flavour() -> str:
    """The sync clients here; tests/clients/test_async_clients.py runs every test of this module
    against their asyncio twins (driven through Synced), as a module of its own."""
    return "sync"


@pytest.fixture
def make(server, flavour):
    """Build clients (on the scripted server unless told); all closed before the server stops."""
    made = []

    def build(kind=PlatformClient, *, base_url=None, **options):
        options.setdefault("retry_for", 5.0)
        options.setdefault("timeout", 2.0)
        credential = {"api_key": KEY} if kind is PlatformClient else {"token": TOKEN}
        if flavour == "async":
            made.append(Synced(ASYNC_TWIN[kind](base_url or server.url, **credential, **options)))
        else:
            made.append(kind(base_url or server.url, **credential, **options))
        return made[-1]

    yield build
    for client in made:
        client.close()


@pytest.fixture
def platform(make):
    return make(PlatformClient)


@pytest.fixture
def internal(make):
    return make(ClusterClient)


# -- what goes on the wire ------------------------------------------------------------------


def test_a_create_makes_one_uuidv7_key_and_sends_it_on_every_retry(platform, server):
    server.script(drop(), reply(503), reply(201, OBJECT), reply(201, OBJECT))

    assert platform.create("/v1/things", {"name": "main-db"}) == OBJECT
    platform.create("/v1/things", {"name": "main-db"})

    first, second, third, other = server.requests
    keys = [r.headers["Idempotency-Key"] for r in server.requests]
    assert keys[0] == keys[1] == keys[2] != keys[3]  # one key per call, the same on its retries
    assert uuid.UUID(keys[0]).version == uuid.UUID(keys[3]).version == 7
    sent = {(r.method, r.path, r.body) for r in (first, second, third)}
    assert sent == {("POST", "/v1/things", b'{"name":"main-db"}')}
    assert len({r.headers["X-Request-ID"] for r in (first, second, third)}) == 1
    assert all(r.headers["Authorization"] == f"Bearer {KEY}" for r in server.requests)


def test_a_create_sends_the_key_it_is_given(platform, server):
    server.script(reply(200, OBJECT, headers={"Idempotent-Replayed": "true"}))

    assert platform.create("/v1/things", {"name": "main-db"}, idempotency_key="first-db") == OBJECT
    assert server.requests[0].headers["Idempotency-Key"] == "first-db"
    assert PlatformClient.new_idempotency_key() != PlatformClient.new_idempotency_key()


def test_update_patches_the_fields_and_answers_the_object(platform, server):
    server.script(reply(200, {**OBJECT, "generation": 2}))

    assert platform.update(f"/v1/things/{OBJECT['id']}", {"plan": "memory-8"})["generation"] == 2
    [sent] = server.requests
    assert (sent.method, sent.json, sent.headers.get("Idempotency-Key")) == ("PATCH", {"plan": "memory-8"}, None)


def test_the_internal_client_creates_with_the_callers_id_and_updates_with_a_generation(internal, server):
    server.script(reply(201, OBJECT), reply(200, OBJECT), reply(200, {**OBJECT, "generation": 3}))

    assert internal.create("/v1/things", OBJECT) == OBJECT  # created
    assert internal.create("/v1/things", OBJECT) == OBJECT  # already there: the same answer
    assert internal.update(f"/v1/things/{OBJECT['id']}", {"name": "x"}, generation=3)["generation"] == 3

    create, again, put = server.requests
    assert create.json == again.json == OBJECT
    assert (put.method, put.json) == ("PUT", {"name": "x", "generation": 3})
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in server.requests)
    assert "Idempotency-Key" not in create.headers


# -- deletes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "outcome"), [(204, Outcome.DELETED), (202, Outcome.DELETED),
                                                 (410, Outcome.ALREADY_GONE)])
def test_a_public_delete_says_whether_it_deleted_or_found_it_gone(platform, server, status, outcome):
    server.script(reply(status, OBJECT if status == 202 else problem(410, "gone") if status == 410 else None))

    done = platform.delete("/v1/things/x")

    assert (done.outcome, done.meta.status) == (outcome, status)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", [PlatformClient, ClusterClient])
def test_a_delete_retried_after_a_lost_answer_that_finds_it_deleted_is_done(make, server, kind):
    server.script(drop(), reply(410, problem(410, "gone")))

    done = make(kind).delete("/v1/things/x")

    assert (done.outcome, done.meta.attempts) == (Outcome.ALREADY_GONE, 2)
    assert [r.method for r in server.requests] == ["DELETE", "DELETE"]


@pytest.mark.parametrize(("status", "outcome"), [(204, Outcome.DELETED), (404, Outcome.NEVER_SEEN),
                                                 (410, Outcome.ALREADY_GONE)])
def test_an_internal_delete_says_what_it_found(internal, server, status, outcome):
    server.script(reply(status, None if status == 204 else problem(status, "x")))

    assert internal.delete("/v1/things/x").outcome is outcome


def test_an_internal_delete_that_refuses_unknown_ids_sends_no_delete_for_one(internal, server):
    server.script(reply(404, problem(404, "not_found")))

    with pytest.raises(NotFound):
        internal.delete("/v1/things/x", unknown="refuse")
    assert [r.method for r in server.requests] == ["GET"]  # no DELETE, so no tombstone


def test_a_public_delete_of_nothing_in_the_account_raises(platform, server):
    server.script(reply(404, problem(404, "not_found")))

    with pytest.raises(NotFound) as raised:
        platform.delete("/v1/things/x")
    assert (raised.value.status, raised.value.code) == (404, "not_found") and raised.value.request_id


# -- what is retried, what raises at once -------------------------------------------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 507])
@pytest.mark.parametrize("kind", [PlatformClient, ClusterClient])
def test_passing_faults_are_retried(make, server, kind, status):
    server.script(reply(status, problem(status, "busy")), reply(200, OBJECT))

    assert make(kind).get("/v1/things/x") == OBJECT
    assert len(server.requests) == 2


def test_a_409_in_flight_is_retried_and_any_other_409_raises_at_once(make, server):
    client = make(PlatformClient)
    in_flight, conflict = problem(409, "request_in_flight"), problem(409, "id_conflict")
    server.script(reply(409, in_flight), reply(200, OBJECT), reply(409, conflict))

    assert client.create("/v1/things", {"name": "a"}) == OBJECT
    with pytest.raises(ProblemError) as raised:
        client.create("/v1/things", {"name": "a"})
    assert (raised.value.status, raised.value.code) == (409, "id_conflict")
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (422, problem(422, "validation_error", errors={"json": {"name": ["Missing data for required field."]}})),
        (422, problem(422, "idempotency_key_reused")),
        (400, problem(400, "invalid_idempotency_key")),
        (401, problem(401, "unauthorized")),
        (403, problem(403, "forbidden")),
        (404, problem(404, "not_found")),
        (410, problem(410, "gone")),
        (413, problem(413, "payload_too_large")),
        (415, None),
    ],
)
@pytest.mark.parametrize("kind", [PlatformClient, ClusterClient])
def test_a_refusal_raises_at_once_with_its_problem(make, server, kind, status, body):
    server.script(reply(status, body), reply(201, OBJECT))
    started = time.monotonic()

    with pytest.raises(ProblemError) as raised:
        make(kind).create("/v1/things", {"id": OBJECT["id"], "name": "main-db"})

    assert len(server.requests) == 1
    # At once: within one attempt's timeout (2 s), where any retry would wait past it; the wall
    # time on a machine running the full suite reached 1.07 s, so a tighter bound measured the load.
    assert time.monotonic() - started < 2.0
    error = raised.value
    assert (error.status, error.problem) == (status, body or {})
    assert error.code == (body or {}).get("code")
    assert str(error).startswith(f"POST /v1/things: {status}")
    if error.code == "validation_error":
        assert error.problem["errors"]["json"]["name"]


def test_retry_after_is_honoured(platform, server):
    server.script(reply(503, problem(503, "unavailable"), headers={"Retry-After": "1"}), reply(200, OBJECT))

    assert platform.get("/v1/things/x") == OBJECT
    assert 0.9 <= server.gaps()[0] < 2.0


def test_a_retry_after_beyond_retry_for_ends_the_call_with_that_answer(make, server):
    client = make(PlatformClient, retry_for=2.0)
    server.script(reply(503, problem(503, "unavailable"), headers={"Retry-After": "30"}), reply(200, OBJECT))
    started = time.monotonic()

    with pytest.raises(ProblemError) as raised:
        client.get("/v1/things/x")

    assert (raised.value.status, len(server.requests)) == (503, 1)
    assert time.monotonic() - started < 1.0


# -- how long it tries ------------------------------------------------------------------------------


def test_a_fault_that_never_passes_raises_its_last_answer_once_retry_for_has_passed(make, server):
    client = make(ClusterClient, retry_for=1.5)
    server.script(reply(503, problem(503, "unavailable")))
    started = time.monotonic()

    with pytest.raises(ProblemError) as raised:
        client.create("/v1/things", OBJECT)

    elapsed = time.monotonic() - started
    assert raised.value.status == 503
    assert 1.5 <= elapsed < 1.5 + 1.0
    assert len(server.requests) >= 3
    assert len({r.body for r in server.requests}) == 1


@pytest.mark.parametrize("kind", [PlatformClient, ClusterClient])
def test_with_nothing_listening_it_gives_up_once_retry_for_has_passed(make, closed_port, kind):
    client = make(kind, base_url=f"http://127.0.0.1:{closed_port}", retry_for=1.5, timeout=1.0)
    started = time.monotonic()

    with pytest.raises(NoAnswer) as raised:
        client.create("/v1/things", {"id": OBJECT["id"]})

    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 1.5 + 1.0 + 0.5  # the window, one attempt, and some slack
    assert raised.value.reason == "connection failed"
    assert raised.value.attempts >= 3
    assert str(raised.value).startswith("POST /v1/things: connection failed")


def test_a_server_that_never_answers_cannot_hold_the_caller(make, silent_port):
    client = make(PlatformClient, base_url=f"http://127.0.0.1:{silent_port}", retry_for=1.0, timeout=0.3)
    started = time.monotonic()

    with pytest.raises(NoAnswer) as raised:
        client.get("/v1/things/x")

    assert raised.value.reason == "timed out"
    assert 1.0 <= time.monotonic() - started < 1.0 + 0.3 + 1.0


def test_retry_for_zero_is_one_attempt(make, server):
    client = make(PlatformClient, retry_for=0)
    server.script(drop(), reply(201, OBJECT))

    with pytest.raises(NoAnswer):
        client.create("/v1/things", {"name": "a"})
    assert len(server.requests) == 1


def test_the_callers_policy_backs_off_with_full_jitter_up_to_8_seconds():
    policy = caller_policy(timeout=10.0, retry_for=60.0)

    assert policy.backoff(1) == 0  # the first retry at once: a lost answer is the commonest fault
    for failures in range(2, 9):
        ceiling = min(8.0, 0.25 * 2 ** (failures - 1))
        pauses = [policy.backoff(failures) for _ in range(500)]
        assert 0 <= min(pauses) < ceiling * 0.2 and ceiling * 0.8 < max(pauses) <= ceiling
    assert policy.longest_call() == 60.0 + 10.0 + 10.0  # the window, then one attempt (connect and read)
    with pytest.raises(ValueError):
        caller_policy(timeout=0, retry_for=1)


# -- listings -------------------------------------------------------------------------------------------


def pages(received):
    """A listing of five items, two to a page, by the request's ``after``."""
    query = parse_qs(urlsplit(received.path).query)
    start = int(query.get("after", ["0"])[0])
    items = [{"id": str(n)} for n in range(start + 1, min(start + 2, 5) + 1)]
    return reply(200, {"items": items, "next_after": items[-1]["id"] if items[-1]["id"] != "5" else None})


@pytest.mark.parametrize("kind", [PlatformClient, ClusterClient])
def test_list_walks_every_page_with_its_filters(make, server, kind):
    server.script(pages)

    listed = make(kind).list("/v1/things", limit=2, include_deleted=True, owner=None)

    assert [item["id"] for item in listed] == ["1", "2", "3", "4", "5"]
    queries = [parse_qs(urlsplit(r.path).query) for r in server.requests]
    assert [q.get("after") for q in queries] == [None, ["2"], ["4"]]
    assert all(q["limit"] == ["2"] and q["include_deleted"] == ["true"] and "owner" not in q for q in queries)


def test_find_by_idempotency_key_asks_without_a_body(platform, server):
    server.script(reply(200, {"items": [OBJECT], "next_after": None}), reply(200, {"items": [], "next_after": None}))

    assert platform.find_by_idempotency_key("/v1/things", "first db") == OBJECT
    assert platform.find_by_idempotency_key("/v1/things", "never-used") is None

    found, missing = server.requests
    assert (found.method, found.body, urlsplit(found.path).path) == ("GET", b"", "/v1/things")
    assert parse_qs(urlsplit(found.path).query) == {"idempotency_key": ["first db"]}
    assert parse_qs(urlsplit(missing.path).query) == {"idempotency_key": ["never-used"]}


# -- batches ----------------------------------------------------------------------------------------------

ITEMS = [{"id": f"id-{n}"} for n in range(4)]


def test_a_batch_answers_each_item_as_its_own_create_would(internal, server):
    server.script(reply(200, {"results": [
        {"status": 201, "object": ITEMS[0]},
        {"status": 200, "object": ITEMS[1]},
        {"status": 409, "problem": problem(409, "id_conflict")},
        {"status": 422, "problem": problem(422, "validation_error")},
    ]}))

    results = internal.create_batch("/v1/things", ITEMS)

    [sent] = server.requests
    assert (sent.path, sent.json) == ("/v1/things/batch", {"items": ITEMS})
    assert results[:2] == ITEMS[:2]
    assert [(r.status, r.code) for r in results[2:]] == [(409, "id_conflict"), (422, "validation_error")]
    assert str(results[2]).startswith("POST /v1/things/batch item 2: 409 id_conflict")


def test_a_batch_answered_413_is_split_and_an_item_too_large_alone_is_its_own_refusal(internal, server):
    def created(count):
        return reply(200, {"results": [{"status": 201, "object": {}}] * count})

    too_large = reply(413, problem(413, "payload_too_large"))
    server.script(too_large, created(2), too_large, too_large, created(1))

    results = internal.create_batch("/v1/things/batch", ITEMS)

    assert [len(r.json["items"]) for r in server.requests] == [4, 2, 2, 1, 1]
    assert results[:2] == [{}, {}] and results[3] == {}
    assert (results[2].status, results[2].code) == (413, "payload_too_large")


def test_a_batch_refused_whole_raises(internal, server):
    server.script(reply(422, problem(422, "validation_error")))

    with pytest.raises(ProblemError) as raised:
        internal.create_batch("/v1/things", ITEMS)
    assert raised.value.status == 422


def test_the_internal_client_given_a_list_of_tokens_sends_the_first(server):
    """INTERNAL_TOKEN during a rotation ("new,old") works as a program's token: the first is sent."""
    server.script(reply(200, OBJECT))
    with ClusterClient(server.url, token=f" {TOKEN} ,older-token", retry_for=5.0, timeout=2.0) as client:
        client.get(f"/v1/things/{OBJECT['id']}")

    [sent] = server.requests
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"


# -- errors by kind, every answer's metadata, per-call options, the environment -------------------------------


@pytest.mark.parametrize(("status", "code", "kind"), [
    (401, "unauthorized", Unauthorized), (403, "forbidden", Unauthorized), (404, "not_found", NotFound),
    (409, "id_conflict", Conflict), (410, "gone", Gone), (422, "validation_error", ValidationFailed),
    (422, "idempotency_key_reused", IdempotencyKeyReused), (400, "bad_request", ProblemError),
])
def test_a_refusal_raises_the_error_of_its_meaning_with_the_request_id(platform, server, status, code, kind):
    server.script(reply(status, problem(status, code)))

    with pytest.raises(kind) as raised:
        platform.get("/v1/things/x")

    assert type(raised.value) is kind and isinstance(raised.value, ProblemError)
    assert (raised.value.status, raised.value.code) == (status, code)
    assert raised.value.request_id == server.requests[0].headers["X-Request-ID"]
    assert raised.value.request_id in str(raised.value)


@pytest.mark.parametrize(("status", "kind"), [(429, RateLimited), (503, Unavailable), (500, Unavailable)])
def test_what_is_still_refused_when_retry_for_runs_out_raises_its_kind(make, server, status, kind):
    server.script(reply(status, problem(status, "x")))

    with pytest.raises(kind):
        make(PlatformClient, retry_for=0.0).get("/v1/things/x")


def test_a_validation_failure_says_each_field_in_its_message(platform, server):
    errors = {"json": {"storage_gb": ["Must be at least 10."], "plan": ["Must be one of: a, b."]}}
    server.script(reply(422, problem(422, "validation_error", errors=errors)))

    with pytest.raises(ValidationFailed) as raised:
        platform.create("/v1/things", {"storage_gb": 1})

    assert raised.value.fields == {"storage_gb": ["Must be at least 10."], "plan": ["Must be one of: a, b."]}
    assert "storage_gb: Must be at least 10." in str(raised.value) and "plan: Must be one of" in str(raised.value)


@pytest.mark.parametrize("body", [["a", "list"], "text", None, 3])
def test_a_body_that_is_not_a_mapping_is_a_type_error_naming_the_argument(platform, internal, server, body):
    with pytest.raises(TypeError, match="^body must be a mapping"):
        platform.create("/v1/things", body)
    with pytest.raises(TypeError, match="^fields must be a mapping"):
        internal.update("/v1/things/x", body, generation=2)
    with pytest.raises(TypeError, match=r"^items\[1\] must be a mapping"):
        internal.create_batch("/v1/things", [{}, body])
    assert server.requests == []  # nothing sent


def test_every_answer_says_how_it_was_answered_created_or_replayed(platform, server):
    limits = {"RateLimit-Limit": "100", "RateLimit-Remaining": "98", "RateLimit-Reset": "1"}
    server.script(reply(201, OBJECT, {**limits, "Location": "/v1/things/1", "Idempotency-Status": "processing"}),
                  reply(200, OBJECT, {**limits, "Idempotent-Replayed": "true", "Idempotency-Status": "completed"}))

    made = platform.create("/v1/things", {"name": "main-db"}, idempotency_key="k-1")
    again = platform.create("/v1/things", {"name": "main-db"}, idempotency_key="k-1")

    assert made == again == OBJECT  # the object, as a dict
    assert (made.meta.status, made.meta.replayed, made.meta.location) == (201, False, "/v1/things/1")
    assert (again.meta.status, again.meta.replayed) == (200, True)
    assert (made.meta.idempotency_status, again.meta.idempotency_status) == ("processing", "completed")
    assert (made.meta.rate_limit.limit, made.meta.rate_limit.remaining, made.meta.rate_limit.reset) == (100, 98, 1)
    assert made.meta.request_id == server.requests[0].headers["X-Request-ID"] != again.meta.request_id


def test_a_call_given_its_own_timeout_and_retry_for_ends_sooner_than_the_clients(make, server):
    client = make(PlatformClient, timeout=10.0, retry_for=30.0)
    server.script(hang(5))

    started = time.monotonic()
    with pytest.raises(NoAnswer) as raised:
        client.get("/v1/things/x", timeout=0.3, retry_for=0.0)

    assert time.monotonic() - started < 2 and raised.value.reason == "timed out"
    assert isinstance(raised.value.error, Exception)  # the last cause, kept


def test_without_arguments_the_clients_read_the_environment_and_say_what_is_missing(server, monkeypatch):
    monkeypatch.setenv("PAIR_PLATFORM_URL", server.url)
    monkeypatch.setenv("PAIR_API_KEY", KEY)
    server.script(reply(200, OBJECT))
    with PlatformClient(retry_for=1.0) as client:
        client.get("/v1/things/x")
    assert server.requests[0].headers["Authorization"] == f"Bearer {KEY}"

    monkeypatch.delenv("PAIR_INTERNAL_TOKEN", raising=False)
    with pytest.raises(ValueError, match="PAIR_INTERNAL_TOKEN"):
        ClusterClient(server.url)


def test_it_names_itself_and_logs_each_retry_at_debug_and_tells_the_hook(make, server, caplog):
    seen = []
    client = make(PlatformClient, on_attempt=seen.append)
    server.script(drop(), reply(503), reply(200, OBJECT))

    with caplog.at_level(logging.DEBUG, logger="idempotent_pair_client"):
        client.get("/v1/things/x")

    assert server.requests[0].headers["User-Agent"] == f"idempotent-pair-client/{idempotent_pair_client.__version__}" \
        f" (python {platform_module.python_version()})"
    assert [(a.number, a.status, a.pause is None) for a in seen] == [(1, None, False), (2, 503, False), (3, 200, True)]
    assert len({a.request_id for a in seen}) == 1
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 and "attempt 1 got connection failed" in retries[0] and "got 503" in retries[1]


def test_a_write_may_ask_the_server_to_wait_for_its_outcome_with_room_in_its_timeout(make, server):
    client = make(PlatformClient, timeout=2.0)
    server.script(reply(201, OBJECT, {"Idempotency-Status": "completed", "Preference-Applied": "wait=10"}),
                  reply(200, OBJECT), reply(204, None))

    made = client.create("/v1/things", {"name": "main-db"}, wait=10)
    client.update("/v1/things/x", {"name": "other"}, wait=3)
    client.delete("/v1/things/x")

    assert [request.headers.get("Prefer") for request in server.requests] == ["wait=10", "wait=3", None]
    assert made.meta.idempotency_status == "completed"
    with pytest.raises(ValueError, match="wait"):
        client.create("/v1/things", {"name": "main-db"}, wait=-1)


def test_a_waiting_call_gets_an_attempt_timeout_beyond_the_wait():
    from idempotent_pair_client.core import WAIT_SLACK, caller_policy, waiting

    policy = caller_policy(timeout=2.0, retry_for=5.0, pool_size=1)
    assert waiting(None, None, policy) == ({}, None)
    assert waiting(10, None, policy) == ({"Prefer": "wait=10"}, 10 + WAIT_SLACK)
    assert waiting(1, 30.0, policy) == ({"Prefer": "wait=1"}, 30.0)  # a longer timeout of the caller's own stands


def test_an_attempt_ends_at_its_total_timeout_even_while_the_answer_still_trickles_in(server, flavour):
    """A call's budget (``total_timeout``, the inline push's) bounds each attempt as a whole, in
    both flavours of the one HTTP core: an answer arriving a byte every 0.2 s never trips the read
    timeout, and still the call is over after its second, as a frozen server's would be."""
    import asyncio

    from idempotent_pair_client.aio import AsyncTransport
    from idempotent_pair_client.transport import ClientPolicy, Transport

    budget = ClientPolicy(connect_timeout=1.0, read_timeout=1.0, retries=0, total_timeout=1.0)
    server.script(trickle(200, b'{"id": "trickling along"}', every=0.2))  # 5 s to arrive whole
    started = time.monotonic()
    with pytest.raises(NoAnswer):
        if flavour == "async":
            async def send() -> None:
                transport = AsyncTransport(server.url, {}, budget)
                try:
                    await transport.send("GET", "/clusters/c-1")
                finally:
                    await transport.close()

            asyncio.run(send())
        else:
            Transport(server.url, {}, budget).send("GET", "/clusters/c-1")
    assert time.monotonic() - started < 1.0 + 0.5
