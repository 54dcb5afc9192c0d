"""The clients a program uses (the sync ones and their asyncio twins), proved with the fault itself: a fault proxy in front of each real
service resets requests before forwarding them and drops answers after the service committed.

- Hundreds of public creates from several threads: no exception, one object per logical create.
- Deletes whose answers are lost: no exception, every object gone.
- Internal creates with the caller's own IDs (single and batched): each ID stored once.
- A 422 (and a 409 id_conflict) raises at once, with one request.
- find_by_idempotency_key recovers what a key made after the caller lost the answer for good.

Giving up once ``retry_for`` has passed, with nothing listening, is in tests/clients. Each test
prints its figures (faults injected by kind, duplicates found); ``-s -p no:xdist`` shows them.
"""
from __future__ import annotations

import os
import random
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import uuid6
from idempotent_pair_client.aio import AsyncClusterClient, AsyncPlatformClient
from idempotent_pair_client.cluster import ClusterClient
from idempotent_pair_client.platform import NoAnswer, PlatformClient, ProblemError
from sqlalchemy import text

from tests.helpers import Synced, cluster_body
from tooling.faultproxy import Fault, FaultProxy, Plan
from tooling.pair import TOKEN
from tooling.testing import wait_for

CREATES = 240  # logical public creates
THREADS = 8
DELETES = 30
INTERNAL = 150  # internal creates: 100 one by one, 50 in batches
RATES = {Fault.DROP_RESPONSE: 0.15, Fault.RESET: 0.1}
SEED = int(os.environ.get("CHAOS_SEED") or 0)


def seed_for(name: str) -> int:
    """Each test's plan, replayable from the run's seed (CHAOS_SEED)."""
    return random.Random(f"{SEED}:clients:{name}").randrange(2**31)


@pytest.fixture(scope="module")
def public_proxy(module_pair):
    """A fault proxy in front of platform_svc (platform_svc itself reaches cluster_svc directly)."""
    with FaultProxy(module_pair.platform_svc.url) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def internal_proxy(module_pair):
    with FaultProxy(module_pair.cluster_svc.url) as proxy:
        yield proxy


@pytest.fixture(params=["sync", "async"])
def flavour(request) -> str:
    """Every test here runs against the sync clients and their asyncio twins (driven through Synced)."""
    return request.param


@pytest.fixture
def platform(pair, public_proxy, flavour) -> PlatformClient:
    """The test's account, calling through the proxy; patient, as a program would be."""
    if flavour == "sync":
        yield pair.current.client(public_proxy.url, timeout=10.0, retry_for=30.0)
        return
    with Synced(AsyncPlatformClient(public_proxy.url, api_key=pair.current.api_key, timeout=10.0,
                                    retry_for=30.0)) as client:
        yield client


@pytest.fixture
def internal(internal_proxy, flavour):
    kind = ClusterClient if flavour == "sync" else lambda *args, **options: Synced(AsyncClusterClient(*args, **options))
    with kind(internal_proxy.url, token=TOKEN, timeout=10.0, retry_for=30.0) as client:
        yield client


def figures(name: str, log, **counts) -> Counter:
    """The faults the proxy injected into ``log``, by kind, printed with the test's own counts."""
    faults = Counter(e.fault.value for e in log if e.fault is not Fault.PASS)
    line = ", ".join(f"{key} {value}" for key, value in {**counts, **faults}.items())
    print(f"\n{name}: {len(log)} requests through the proxy; {line}")
    return faults


def run_all(call, arguments, threads: int = THREADS) -> list:
    """``call`` on each argument from ``threads`` threads, in order; an exception in any is raised."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(call, arguments))


def test_hundreds_of_creates_through_lost_answers_and_resets_make_one_object_each(pair, public_proxy, platform):
    names = [f"logical-{n}" for n in range(CREATES)]
    mark = len(public_proxy.log)
    public_proxy.plan = Plan(seed_for("creates"), RATES)
    try:
        made = run_all(lambda name: platform.create("/v1/clusters", cluster_body(name=name)), names)  # no exception
    finally:
        public_proxy.plan = None
    log = public_proxy.log[mark:]

    stored = pair.platform_rows("clusters")
    per_create = Counter(row["name"] for row in stored.values())
    duplicates = sum(count - 1 for count in per_create.values())
    posts = Counter(e.request.header("Idempotency-Key") for e in log if e.method == "POST")
    faults = figures(
        "public creates", log, logical=CREATES, stored=len(stored), duplicates=duplicates,
        retried=sum(1 for n in posts.values() if n > 1),
        replayed=sum(1 for e in log if e.method == "POST" and e.status == 200),
    )
    assert per_create == Counter(names)  # exactly one stored object per logical create
    assert duplicates == 0
    assert sorted(m["name"] for m in made) == sorted(names) and {m["id"] for m in made} == set(stored)
    # One key per logical create, sent again on each of its retries; the faults did happen, and a
    # create whose answer was lost was answered 200 with the object its first attempt made.
    assert len(posts) == CREATES and sum(posts.values()) == sum(1 for e in log if e.method == "POST")
    assert faults[Fault.DROP_RESPONSE.value] > 0 and faults[Fault.RESET.value] > 0
    dropped = {e.request.header("Idempotency-Key") for e in log if e.fault is Fault.DROP_RESPONSE and e.forwarded}
    assert dropped and all(posts[key] > 1 for key in dropped)
    assert any(e.method == "POST" and e.status == 200 for e in log)
    assert not [e for e in log if e.status is not None and e.status >= 500]
    wait_for(pair.all_synced, what="every create pushed down")
    pair.assert_downstream_matches()


def test_deletes_whose_answers_are_lost_leave_every_object_gone(pair, public_proxy, platform):
    made = [platform.create("/v1/clusters", cluster_body(name=f"doomed-{n}")) for n in range(DELETES)]
    mark = len(public_proxy.log)
    for obj in made:  # the first answer of each delete is lost, after platform_svc committed it
        public_proxy.add_rule(Fault.DROP_RESPONSE, method="DELETE", object_id=obj["id"])

    for obj in made:
        platform.delete(f"/v1/clusters/{obj['id']}")  # no exception
    log = public_proxy.log[mark:]

    figures("public deletes", log, deletes=DELETES)
    for obj in made:
        attempts = [e for e in log if e.object_id == obj["id"]]
        assert [(e.fault, e.forwarded) for e in attempts] == [(Fault.DROP_RESPONSE, True), (Fault.PASS, True)]
        assert attempts[0].status in (202, 204) and attempts[1].status == 410  # deleted by the lost one
        with pytest.raises(ProblemError) as raised:
            platform.get(f"/v1/clusters/{obj['id']}")
        assert (raised.value.status, raised.value.code) == (410, "gone")
    assert all(row["deleted_at"] is not None for row in pair.platform_rows("clusters").values())
    wait_for(pair.all_synced, what="every delete pushed down")
    pair.assert_downstream_matches()
    downstream = pair.cluster_svc_rows("clusters")
    assert all(downstream[obj["id"]]["deleted_at"] is not None for obj in made)


def test_internal_creates_with_the_callers_ids_are_stored_once_each(pair, internal_proxy, internal):
    team = str(uuid.uuid4())
    bodies = [{"id": str(uuid6.uuid7()), "team_id": team, **cluster_body(name=f"own-{n}")} for n in range(INTERNAL)]
    mark = len(internal_proxy.log)
    internal_proxy.plan = Plan(seed_for("internal creates"), RATES)
    try:
        single = run_all(lambda body: internal.create("/v1/clusters", body), bodies[:100], threads=4)
        batched = [result for at in range(100, INTERNAL, 10)
                   for result in internal.create_batch("/v1/clusters", bodies[at:at + 10])]
    finally:
        internal_proxy.plan = None
    log = internal_proxy.log[mark:]

    with pair.cluster_engine.connect() as conn:
        stored = Counter(
            str(row.id) for row in conn.execute(text("SELECT id FROM clusters WHERE team_id = :team"), {"team": team})
        )
    sent = Counter(object_id for e in log for object_id in e.object_ids)
    duplicates = sum(count - 1 for count in stored.values())
    faults = figures(
        "internal creates", log, ids=INTERNAL, stored=len(stored), duplicates=duplicates,
        sent_again=sum(1 for n in sent.values() if n > 1),
    )
    assert stored == Counter(body["id"] for body in bodies)  # each ID once, none missing
    assert [obj["id"] for obj in single + batched] == [body["id"] for body in bodies]  # no ProblemError among them
    assert all(obj["generation"] == 1 and obj["name"] == body["name"] for obj, body in zip(single + batched, bodies))
    assert faults[Fault.DROP_RESPONSE.value] > 0 and faults[Fault.RESET.value] > 0
    # An ID whose answer was lost went again and was answered 200: it was there already.
    lost = {i for e in log if e.fault is Fault.DROP_RESPONSE and e.forwarded for i in e.object_ids}
    assert lost and all(sent[i] > 1 for i in lost)
    assert any(status == 200 for e in log for status in e.statuses().values())

    # An update and a delete whose answers are lost: done, once.
    target = f"/v1/clusters/{bodies[0]['id']}"
    internal_proxy.add_rule(Fault.DROP_RESPONSE, method="PUT", times=1)
    internal_proxy.add_rule(Fault.DROP_RESPONSE, method="DELETE", times=1)
    fields = {key: bodies[0][key] for key in ("name", "plan", "storage_gb")}
    assert internal.update(target, {**fields, "plan": "memory-8"}, generation=2)["plan"] == "memory-8"
    done = internal.delete(target)  # its first answer lost: the retry finds what the first attempt did
    assert (done.outcome.value, done.meta.attempts) == ("already gone", 2)
    assert pair.cluster_row("clusters", bodies[0]["id"])["deleted_at"] is not None


def test_a_refusal_raises_at_once_with_one_request(pair, public_proxy, internal_proxy, platform, internal):
    mark = len(public_proxy.log)
    started = time.monotonic()
    with pytest.raises(ProblemError) as raised:
        platform.create("/v1/clusters", cluster_body(storage_gb=1), idempotency_key="too-small")
    assert time.monotonic() - started < 5
    assert (raised.value.status, raised.value.code) == (422, "validation_error")
    assert "storage_gb" in str(raised.value.problem["errors"])
    assert [e.request.header("Idempotency-Key") for e in public_proxy.log[mark:]] == ["too-small"]

    platform.create("/v1/clusters", cluster_body(name="keyed"), idempotency_key="keyed")
    mark = len(public_proxy.log)
    with pytest.raises(ProblemError) as raised:
        platform.create("/v1/clusters", cluster_body(name="other"), idempotency_key="keyed")
    assert (raised.value.status, raised.value.code) == (422, "idempotency_key_reused")
    assert len(public_proxy.log[mark:]) == 1

    body = {"id": str(uuid6.uuid7()), "team_id": str(uuid.uuid4()), **cluster_body()}
    internal.create("/v1/clusters", body)
    mark = len(internal_proxy.log)
    with pytest.raises(ProblemError) as raised:
        internal.create("/v1/clusters", {**body, "region": "us-east-1"})
    assert (raised.value.status, raised.value.code) == (409, "id_conflict")
    assert len(internal_proxy.log[mark:]) == 1


def test_find_by_idempotency_key_recovers_what_a_lost_answer_made(pair, public_proxy, platform):
    """The caller's process died after sending: one attempt (retry_for=0), its answer lost for good.
    Restarted, it asks what its key made, and sends no body."""
    died = pair.current.client(public_proxy.url, retry_for=0)
    key, body = PlatformClient.new_idempotency_key(), cluster_body(name="recovered")
    public_proxy.add_rule(Fault.DROP_RESPONSE, method="POST", times=1)
    with pytest.raises(NoAnswer):
        died.create("/v1/clusters", body, idempotency_key=key)
    mark = len(public_proxy.log)

    found = platform.find_by_idempotency_key("/v1/clusters", key)

    assert found is not None and found["name"] == "recovered"
    assert list(pair.platform_rows("clusters")) == [found["id"]]
    [asked] = public_proxy.log[mark:]
    assert (asked.method, asked.request.body, asked.request.path) == ("GET", b"", "/v1/clusters")
    assert platform.find_by_idempotency_key("/v1/clusters", PlatformClient.new_idempotency_key()) is None
    # The same under a parent: the clients know no resource, only paths.
    rules = f"/v1/clusters/{found['id']}/firewall-rules"
    public_proxy.add_rule(Fault.DROP_RESPONSE, method="POST", times=1)
    with pytest.raises(NoAnswer):
        died.create(rules, {"cidr": "10.0.0.0/8"}, idempotency_key=key)
    assert platform.find_by_idempotency_key(rules, key)["cidr"] == "10.0.0.0/8"
    # And a create sent again with the key answers the same object, never a second one.
    assert platform.create("/v1/clusters", body, idempotency_key=key)["id"] == found["id"]
