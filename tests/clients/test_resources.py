"""The client's resources by name (idempotent_pair_client.resources, generated from the
declarations by tooling/clientgen.py): up to date, what they send, and what a caller's
``mypy --strict`` sees. Their agreement with the served document is
tests/platform_svc/test_client_resources.py."""
from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import idempotent_pair_client
from idempotent_pair_client import ClusterClient, NotFound, PlatformClient, accessors, pages, resources
from idempotent_pair_client.aio import AsyncPlatformClient
from idempotent_pair_client.resources import Cluster, InternalCluster

from tooling import clientgen
from tooling.scripted import reply

CALLERS = Path(__file__).with_name("callers")
ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"id": "0193a1b2-7c00-7000-8000-000000000001", "name": "main-db", "region": "eu-west-1",
           "postgres_version": 16, "plan": "standard-2", "storage_gb": 100, "generation": 1, "sync_state": "synced",
           "sync_error": None, "synced_at": None, "created_at": "2026-11-29T02:06:40.123456+00:00", "updated_at": "2026-11-29T02:06:40.123456Z", "deleted_at": None,
           "added_by_a_newer_service": 1}
RULE = {"id": "0193a1b2-7c00-7000-8000-000000000002", "cluster_id": CLUSTER["id"], "cidr": "10.0.0.0/8",
        "description": ""}


def test_the_generated_resources_are_what_the_declarations_make_now():
    assert clientgen.main(["--check"]) == 0, "run: python -m tooling.clientgen"


@pytest.fixture
def api(server):
    with PlatformClient(server.url, api_key="k", retry_for=2.0, timeout=2.0) as client:
        yield client


def test_a_collection_by_name_sends_what_the_path_based_call_would_and_answers_a_typed_record(api, server):
    server.script(reply(201, CLUSTER), reply(200, {"items": [RULE], "next_after": None}), reply(204))

    made = api.clusters.create({"name": "main-db", "region": "eu-west-1", "postgres_version": 16,
                                "plan": "standard-2", "storage_gb": 100}, idempotency_key="key-1")
    rules = list(api.firewall_rules(made.id).list(limit=10))
    deleted = api.firewall_rules(made.id).delete(RULE["id"])

    assert isinstance(made, Cluster) and (made.name, made.storage_gb, made.meta.status) == ("main-db", 100, 201)
    assert made.extra == {"added_by_a_newer_service": 1}  # kept, never refused
    assert [(rule.id, rule.cidr, rule.meta.status) for rule in rules] == [(RULE["id"], "10.0.0.0/8", 200)]
    assert deleted.outcome.value == "deleted"
    create, listing, delete = server.requests
    assert (create.method, create.path, create.headers["Idempotency-Key"]) == ("POST", "/v1/clusters", "key-1")
    assert (listing.method, listing.path) == ("GET", f"/v1/clusters/{CLUSTER['id']}/firewall-rules?limit=10")
    assert (delete.method, delete.path) == ("DELETE", f"/v1/clusters/{CLUSTER['id']}/firewall-rules/{RULE['id']}")


def test_a_record_has_its_times_as_datetimes_and_the_meta_of_the_call_that_answered_it(api, server):
    server.script(reply(200, CLUSTER, headers={"Idempotency-Status": "completed", "RateLimit-Limit": "100"}))

    got = api.clusters.get(CLUSTER["id"])

    assert got.created_at == datetime(2026, 11, 29, 2, 6, 40, 123456, tzinfo=timezone.utc)
    assert got.updated_at == got.created_at and got.synced_at is None  # "Z" read too; None stays None
    assert (got.meta.status, got.meta.idempotency_status, got.meta.rate_limit.limit) == (200, "completed", 100)


def page(start: int, stop: int, last: int) -> object:
    items = [{**CLUSTER, "id": f"0193a1b2-7c00-7000-8000-{n:012d}"} for n in range(start, stop)]
    return reply(200, {"items": items, "next_after": items[-1]["id"] if stop <= last else None})


def test_a_listing_is_a_page_whose_iteration_walks_every_page(api, server):
    server.script(page(1, 3, 4), page(3, 5, 4), page(3, 5, 4))

    first = api.clusters.list(limit=2, timeout=1.5)
    fetched = len(server.requests)
    everything = [c.id[-1] for c in first]

    assert [c.id[-1] for c in first.data] == ["1", "2"] and first.has_more and first.next_after == first.data[-1].id
    assert everything == ["1", "2", "3", "4"]  # the first page, then the one after it, fetched as reached
    last = first.next_page()
    assert last is not None and not last.has_more and last.next_page() is None and last.next_after is None
    assert all(isinstance(c, Cluster) and c.meta.status == 200 for c in [*first.data, *last.data])
    assert fetched == 1  # the first page only, until the iteration reaches the next
    assert [r.path for r in server.requests] == [
        "/v1/clusters?limit=2", f"/v1/clusters?limit=2&after={first.next_after}",
        f"/v1/clusters?limit=2&after={first.next_after}"]


def test_a_misspelt_filter_is_refused_before_anything_is_sent(api, server):
    with pytest.raises(TypeError, match="limt"):
        api.clusters.list(limt=2)  # type: ignore[call-arg]

    assert server.requests == []


def test_an_async_listing_is_awaited_for_a_page_or_walked_for_every_object(server):
    server.script(page(1, 3, 4), page(1, 3, 4), page(3, 5, 4))

    async def calls():
        async with AsyncPlatformClient(server.url, api_key="k", retry_for=2.0, timeout=2.0) as api:
            first = await api.clusters.list(limit=2)
            return first, [c.id[-1] async for c in api.clusters.list(limit=2)]

    first, everything = asyncio.run(calls())

    assert [c.id[-1] for c in first.data] == ["1", "2"] and first.has_more
    assert everything == ["1", "2", "3", "4"]


def test_every_name_a_caller_uses_imports_from_the_package_root():
    for name in resources.__all__ + ["Page", "Meta", "Record", "RateLimit", "IdempotencyStatus"]:
        assert getattr(idempotent_pair_client, name) is not None, name
    assert {"Cluster", "ClusterCreate", "FirewallRuleUpdate", "InternalCluster", "Region", "Plan", "SyncState"} <= \
        set(idempotent_pair_client.__all__)


def public_methods():
    from idempotent_pair_client import aio, core
    classes = [core.ServiceClient, PlatformClient, ClusterClient, aio.AsyncPlatformClient, aio.AsyncClusterClient,
               pages.Page, pages.AsyncPage, accessors.Record,
               *(getattr(resources, name) for name in resources.__all__ if name.endswith(("s", "Resources"))
                 and inspect.isclass(getattr(resources, name)))]
    for cls in classes:
        for name, member in inspect.getmembers(cls, lambda m: inspect.isfunction(m) or isinstance(m, property)):
            if not name.startswith("_"):
                yield f"{cls.__name__}.{name}", member


def test_every_public_method_of_the_client_says_what_it_does():
    undocumented = [name for name, member in public_methods() if not inspect.getdoc(member)]

    assert undocumented == []


def test_the_internal_client_has_its_collections_by_name_with_the_callers_ids(server):
    internal_copy = {k: v for k, v in CLUSTER.items() if k not in ("sync_state", "sync_error", "synced_at")}
    server.script(reply(201, {**internal_copy, "team_id": "t"}), reply(200, {**internal_copy, "generation": 2}),
                  reply(404, {"code": "not_found"}))
    with ClusterClient(server.url, token="t", retry_for=2.0, timeout=2.0) as internal:
        made = internal.clusters.create({"id": CLUSTER["id"], "team_id": "t", "name": "main-db", "region": "eu-west-1",
                                         "postgres_version": 16, "plan": "standard-2", "storage_gb": 100})
        moved = internal.clusters.update(made.id, {"name": "main-db", "plan": "memory-8", "storage_gb": 100},
                                         generation=2)
        with pytest.raises(NotFound):
            internal.firewall_rules(made.id).delete(RULE["id"], unknown="refuse")

    assert isinstance(made, InternalCluster) and (made.team_id, made.meta.status) == ("t", 201)
    assert moved.generation == 2 and server.requests[1].json["generation"] == 2
    assert [r.method for r in server.requests] == ["POST", "PUT", "GET"]  # refused unknown: no DELETE sent


def test_the_async_twin_has_the_same_collections_by_name(server):
    server.script(reply(201, CLUSTER), reply(200, {"items": [RULE], "next_after": None}))

    async def calls():
        async with AsyncPlatformClient(server.url, api_key="k", retry_for=2.0, timeout=2.0) as api:
            made = await api.clusters.create({"name": "main-db", "region": "eu-west-1", "postgres_version": 16,
                                              "plan": "standard-2", "storage_gb": 100})
            return made, [rule async for rule in api.firewall_rules(made.id).list()]

    made, rules = asyncio.run(calls())

    assert isinstance(made, Cluster) and made.meta.status == 201
    assert [(rule.id, rule.cidr) for rule in rules] == [(RULE["id"], "10.0.0.0/8")]
    assert [(r.method, r.path) for r in server.requests] == [
        ("POST", "/v1/clusters"), ("GET", f"/v1/clusters/{CLUSTER['id']}/firewall-rules")]


def mypy(*scripts: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, scripts)],
                          capture_output=True, text=True, timeout=300)


def readme_session(readme: Path) -> str:
    """The README's Python session (its ``pycon`` block) as the program a caller would write: the
    lines typed at ``>>>`` and ``...``, without what they print."""
    block = readme.read_text().split("```pycon\n", 1)[1].split("```", 1)[0]
    return "".join(line[4:] + "\n" for line in block.splitlines() if line.startswith((">>> ", "... ")))


def test_a_callers_mypy_strict_accepts_every_accessor_and_the_readme_and_refuses_each_mistake(tmp_path):
    # One run for every caller (mypy's start, typeshed included, is most of its time): every error
    # must be the misspelt caller's.
    session = tmp_path / "readme_session.py"
    session.write_text(readme_session(ROOT / "README.md"))
    checked = mypy(CALLERS / "every_accessor.py", session, CALLERS / "misspelt.py")
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]

    assert "api.clusters.list(limit=1)" in session.read_text()
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert errors and all(Path(line.split(":")[0]).name == "misspelt.py" for line in errors), checked.stdout
    assert 'Extra key "storage_gbs" for TypedDict "ClusterUpdate"' in checked.stdout  # a body's key
    assert '"Cluster" has no attribute "storage_gb_total"' in checked.stdout  # a record's field
    assert 'Missing key "storage_gb" for TypedDict "InternalClusterUpdate"' in checked.stdout  # a PUT's whole body
    assert 'Unexpected keyword argument "limt" for "list"' in checked.stdout  # a listing's filter
    assert '"Literal[\'mars-1\']", TypedDict item "region"' in checked.stdout  # a vocabulary
    assert '"datetime" has no attribute "removesuffix"' in checked.stdout  # a time
